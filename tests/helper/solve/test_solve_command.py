"""``run(SolveConfig)``: shards in, discretizer / policies / counts / labels / summary out."""

import ast
import inspect
import itertools
import json
from dataclasses import fields

import numpy as np
import polars as pl
import pytest

import helper.solve.solve_command as cmd
from helper.solve.solve_command import SolveConfig, run
from tabular_rl import Discretizer, Solution, TabularModel, simulate
from trajectories.schema import EmptyDataset, SchemaError
from trajectories.shards import mark_complete


@pytest.fixture
def shards(tmp_path):
    rng = np.random.default_rng(0)
    T, S = 6, 4
    model = TabularModel(
        transitions=rng.dirichlet(np.ones(S + 1) * 2, size=(T, S, 2)),
        rewards=rng.random((T, S, 2)) / T,
        start=np.full(S, 1 / S),
    )
    df = simulate(model, 600, budget=3, behaviour=0.3, seed=0).drop("state")
    data = tmp_path / "trajectories"
    (data / "env=a").mkdir(parents=True)
    ep = df["episode_id"].cast(pl.Int64)
    df.filter(ep < 200).write_parquet(data / "shard-000.parquet")
    df.filter((ep >= 200) & (ep < 400)).write_parquet(data / "shard-001.parquet")
    df.filter(ep >= 400).write_parquet(data / "env=a" / "shard-002.parquet")
    mark_complete(data)  # a finished collection (manifest.json, complete: true)
    (data / ".shard-003.parquet").write_text("half-written temp file")  # must be skipped
    return data, df


def test_run_writes_every_output(shards, tmp_path, capsys):
    data, df = shards
    out = tmp_path / "solve"
    summary = run(SolveConfig(data=str(data), budgets=[2, 1, 2], bins=4, binning="uniform", out=str(out)))
    printed = capsys.readouterr().out
    assert "C=1" in printed and "C=2" in printed and "expected success" in printed

    on_disk = json.loads((out / "solution.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["data"]["rows"] == df.height and on_disk["data"]["shards"] == 3
    # The default back-off is chosen from the data and recorded.
    assert on_disk["data"]["reward_backoff"] > 0 and on_disk["data"]["transition_backoff"] > 0
    fixed = run(SolveConfig(data=str(data), budgets=[1], bins=4, backoff="5", out=str(tmp_path / "fixed")))
    assert fixed["data"]["reward_backoff"] == fixed["data"]["transition_backoff"] == 5.0
    assert [s["budget"] for s in on_disk["solutions"]] == [1, 2]
    for s in on_disk["solutions"]:
        assert s["expected_interventions"] <= s["budget"]
        assert 0 < s["expected_success"] <= 1

    disc = Discretizer.load(out / "discretizer.json")
    assert disc.bins == 4 and disc.binning == "uniform"
    sol = Solution.load(out / "policy_c2.npz", disc)
    assert sol.policy.shape == (6, 5, 3) and sol.hard_budget
    counts = pl.read_csv(out / "counts.csv")
    assert counts["n"].sum() == df.height and {"step", "score_bin", "action", "n"} <= set(counts.columns)

    labels = pl.read_parquet(out / "labels.parquet")
    assert labels.height == df.height
    assert set(df.columns) | {"optimal_intervene_c1", "optimal_intervene_c2"} == set(labels.columns)
    # C=1 labels never intervene with no budget left, and the C=2 helper intervenes at least as often.
    assert not labels.filter(pl.col("budget_left") == 0)["optimal_intervene_c1"].any()
    assert labels["optimal_intervene_c2"].sum() >= labels["optimal_intervene_c1"].sum()


@pytest.mark.parametrize("method", ["lagrangian", "lp"])
def test_budget_in_expectation_methods(shards, tmp_path, method):
    data, _ = shards
    summary = run(SolveConfig(data=str(data), budgets=[1], method=method, bins=3, out=str(tmp_path / method)))
    (sol,) = summary["solutions"]
    assert sol["method"] == method and sol["expected_interventions"] <= 1 + 1e-7


def test_refusals_name_the_file_or_field(shards, tmp_path):
    data, df = shards
    with pytest.raises(ValueError, match="method='best'"):
        run(SolveConfig(data=str(data), method="best", out=str(tmp_path / "x")))
    for bad in ("often", "-1", "inf"):
        with pytest.raises(ValueError, match=f"backoff='{bad}'.*--backoff auto"):
            run(SolveConfig(data=str(data), backoff=bad, out=str(tmp_path / "x")))
    with pytest.raises(FileNotFoundError, match="no such trajectory folder"):
        run(SolveConfig(data=str(tmp_path / "missing"), out=str(tmp_path / "x")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyDataset, match="empty: the dataset is empty.*collect trajectories first"):
        run(SolveConfig(data=str(tmp_path / "empty"), out=str(tmp_path / "x")))
    df.head(0).write_parquet(tmp_path / "empty" / "shard-000.parquet")  # shards with no rows
    mark_complete(tmp_path / "empty")
    with pytest.raises(EmptyDataset, match="no rows in 1 shard"):
        run(SolveConfig(data=str(tmp_path / "empty"), out=str(tmp_path / "x")))
    df.drop("prm_score").write_parquet(data / "shard-009.parquet")
    with pytest.raises(SchemaError, match=r"shard-009.parquet: missing column 'prm_score'; score the shards first"):
        run(SolveConfig(data=str(data), out=str(tmp_path / "x")))


def test_solve_refuses_text_steps_and_corrupt_files(shards, tmp_path):
    data, df = shards
    df.with_columns(pl.col("step").cast(pl.String)).write_parquet(data / "shard-001.parquet")
    with pytest.raises(SchemaError, match=r"shard-001.parquet: column 'step' has type String, expected an integer"):
        run(SolveConfig(data=str(data), out=str(tmp_path / "x")))
    full = (data / "shard-000.parquet").read_bytes()
    (data / "shard-001.parquet").write_bytes(full[: len(full) // 2])  # truncated
    with pytest.raises(SchemaError, match=r"shard-001.parquet: not a readable Parquet file, truncated or corrupt"):
        run(SolveConfig(data=str(data), out=str(tmp_path / "x")))


def test_every_config_field_has_a_docstring():
    body = ast.parse(inspect.getsource(cmd.SolveConfig)).body[0].body
    documented = {
        node.target.id
        for node, nxt in itertools.pairwise(body)
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
    }
    assert documented == {f.name for f in fields(SolveConfig)}
    assert {"data", "budgets", "method", "bins", "binning", "step_buckets", "smoothing", "out"} <= documented
