"""``helpgate solve --help-kinds``: the tiered table and per-row optimal kinds from rows that name the help they called;
distilled to a helper folder that ``HelperGate.load`` plays; bad flags refused in one line; no --help-kinds: as before."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from one_line_errors import one_error_line
from tiered_rows import PRICES, RiskScorer, play, rapids_rows

from agile.protocol import Observation
from examples.tiered_rapids import HORIZON, KINDS, RISKS, risk_of
from helper import HelperGate
from helper.commands.cli import main
from helper.solve.solve_command import SolveConfig, run
from helper.gates.tiered_helper_gate import TieredHelperGate
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, TieredSolution, estimate_tiered, solve_tiered
from trajectories.shards import mark_complete

KIND_FLAGS = ["compute:1", "stronger:2", "human:4"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    rows = rapids_rows(1200, seed=1)
    data = tmp_path_factory.mktemp("tiered") / "trajectories"
    data.mkdir()
    rows.write_parquet(data / "shard-000.parquet")
    mark_complete(data)
    return data, rows


@pytest.fixture(scope="module")
def solved(shards, tmp_path_factory):
    data, _ = shards
    out = tmp_path_factory.mktemp("solve") / "solve"
    summary = run(SolveConfig(data=str(data), kinds=KIND_FLAGS, caps=["human=1"], budgets=[2, 6], bins=3,
                              binning="uniform", out=str(out)))
    return out, summary


def test_the_tiered_solve_writes_tables_and_exact_labels(shards, solved):
    data, rows = shards
    out, summary = solved
    record = json.loads((out / "solve.json").read_text())
    assert record["tiered"] == {"kinds": list(KINDS), "prices": PRICES, "caps": {"human": 1}}
    assert sorted(record["files"]) == sorted(["discretizer.json", "counts.csv", "labels.parquet", "solution.json",
                                              "tiered_policy_c2.npz", "tiered_policy_c6.npz"])
    # The table is the one solve_tiered gives on the same rows and discretizer.
    disc = Discretizer.load(out / "discretizer.json")
    model = estimate_tiered(rows, disc, tuple(KINDS), objective="success")
    for budget in (2, 6):
        saved = TieredSolution.load(out / f"tiered_policy_c{budget}.npz")
        again = solve_tiered(model, Resources.of(list(PRICES.values()), budget, [None, None, 1], horizon=HORIZON))
        assert np.array_equal(saved.tables[0], again.tables[0])
        assert saved.expected_success == pytest.approx(again.expected_success, abs=1e-12)
        assert saved.expected_cost <= budget + 1e-9
    assert [s["budget"] for s in summary["solutions"]] == [2, 6]
    assert summary["data"]["calls"] == {k: int((rows["help_kind"] == k).sum()) for k in KINDS}
    counts = pl.read_csv(out / "counts.csv")
    assert counts["n"].sum() == rows.height and set(counts["action"]) == {"agent", *KINDS}
    # Each row's label, brute force: its budget left is B less the prices of the episode's earlier logged calls.
    labels = pl.read_parquet(out / "labels.parquet")
    assert labels.height == rows.height and set(labels.columns) == set(rows.columns) | {"optimal_kind_c2",
                                                                                        "optimal_kind_c6"}
    six = TieredSolution.load(out / "tiered_policy_c6.npz")
    spent: dict[str, float] = {}
    human: dict[str, int] = {}
    checked = 0
    for row in labels.sort(["episode_id", "step"]).iter_rows(named=True):
        e = row["episode_id"]
        state = int(disc.transform([row["prm_score"]], [row["step"]])[0])
        want = six.kind(row["step"], state, max(6 - spent.get(e, 0.0), 0), {"human": max(1 - human.get(e, 0), 0)})
        assert row["optimal_kind_c6"] == (want or "")
        if want:  # a label never calls what the row's budget or cap does not allow
            assert PRICES[want] <= 6 - spent.get(e, 0.0) and (want != "human" or human.get(e, 0) == 0)
        kind = row["help_kind"]
        spent[e] = spent.get(e, 0.0) + (PRICES[kind] if kind else 0.0)
        human[e] = human.get(e, 0) + (kind == "human")
        checked += 1
    assert checked == rows.height and set(labels["optimal_kind_c6"]) == {"", *KINDS}


def test_distilled_the_classifier_chooses_as_the_table_and_loads_with_it(solved, tmp_path, capsys):
    out, _ = solved
    assert main(["distill", "--labels", str(out), "--prm", "none", "--max-rows", "8000", "--out",
                 str(tmp_path / "helper")], experiments=True) == 0
    assert "tiered helper for budget 6" in capsys.readouterr().out
    config = json.loads((tmp_path / "helper" / "helper.json").read_text())
    assert config["backend"] == "tiered_features" and config["feature_names"][-1] == "calls_left_human"
    # The label is a function of (step, risk, budget left, human calls left), every one an input: learned exactly.
    assert config["report"]["test"]["agreement"] >= 0.99
    table = TieredSolution.load(out / "tiered_policy_c6.npz")
    logged = pl.read_parquet(out / "labels.parquet")
    seen = sorted({(s, risk_of(t)) for s, t in zip(logged["step"], logged["state_text"])})
    for backend in (None, "tiered_table"):
        gate = HelperGate.load(tmp_path / "helper", backend=backend)
        assert isinstance(gate, TieredHelperGate) and gate.budget == 6 and gate.caps == {"human": 1}
        assert gate.backend == (backend or "tiered_features") and gate.trained_on["budget"] == 6
        gate.scorer = RiskScorer()
        said = []
        for step, risk in seen:  # the cells the data holds (a dangerous first crossing never comes)
            for left, human in ((6, 1), (5, 1), (4, 1), (3, 0), (2, 0), (1, 0)):
                obs = Observation(f"e{step}{risk}{left}", "rapids", "t", step, f"{risk} water", HORIZON, {})
                want = table.kind(step, RISKS.index(risk), left, {"human": human})
                said.append(gate.choose(obs, budget_left=left, calls_left={"human": human}) == want)
        assert np.mean(said) >= (0.95 if backend is None else 1.0)
    # Played on the true river, on the same episodes (paired), the distilled helper keeps >= 0.95 of the table's
    # success there.
    gates = [HelperGate.load(tmp_path / "helper", backend=b) for b in (None, "tiered_table")]
    for gate in gates:
        gate.scorer = RiskScorer()
    runs, table_runs = (play(gate, 400) for gate in gates)
    assert np.mean([s for s, _, _ in runs]) >= 0.95 * np.mean([s for s, _, _ in table_runs]) > 0.3
    assert max(c for _, c, _ in runs) <= 6 and max(calls.get("human", 0) for _, _, calls in runs) <= 1
    assert main(["distill", "--labels", str(out), "--prm", "none", "--solved-budget", "3",
                 "--out", str(tmp_path / "h3")]) == 2
    assert "budgets [2, 6] only" in one_error_line(capsys)


@pytest.mark.parametrize("flags, says", [
    (["--help-kinds", "compute:1", "stronger:2", "human:4", "oracle:8"], "kinds=oracle:8: no row of"),
    (["--help-kinds", "compute:1", "stronger:2"], "also call ['human']"),
    (["--help-kinds", "compute:0", "stronger:2", "human:4"], "kinds='compute:0': the price of compute must be a finite"),
    (["--help-kinds", "compute:nan", "stronger:2", "human:4"], "kinds='compute:nan': the price"),
    (["--help-kinds", "compute", "stronger:2", "human:4"], "kinds='compute': give each kind as NAME:PRICE"),
    (["--help-kinds", *KIND_FLAGS, "--help-caps", "oracle=1"], "caps='oracle=1': 'oracle' is not among --help-kinds"),
    (["--help-kinds", *KIND_FLAGS, "--help-caps", "human=-1"], "caps='human=-1': give each cap as KIND=CALLS"),
    (["--help-caps", "human=1"], "caps=human=1: caps limit kinds of help"),
    (["--help-kinds", *KIND_FLAGS, "--method", "lp"], "method='lp': a solve with --help-kinds is exact or lagrangian"),
    (["--help-kinds", *KIND_FLAGS, "--budgets", "25"], "budgets=25: the longest episode"),
])
def test_bad_flags_are_one_line_naming_the_flag(shards, tmp_path, capsys, flags, says):
    data, _ = shards
    assert main(["solve", "--data", str(data), "--bins", "3", "--out", str(tmp_path / "out"), *flags]) == 2
    line = one_error_line(capsys)
    assert says in line, line


def test_rows_without_help_kind_are_refused_with_kinds_and_solved_as_before_without(shards, tmp_path, capsys):
    data, rows = shards
    plain = tmp_path / "plain"
    plain.mkdir()
    rows.drop("help_kind", "help_cost").write_parquet(plain / "shard-000.parquet")
    mark_complete(plain)
    assert main(["solve", "--data", str(plain), "--help-kinds", *KIND_FLAGS, "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)  # no help_kind column, or (rows read with one kind's defaults) no such kind called
    assert line.startswith("helpgate solve: error: kinds=") and "help_kind" in line, line
    # No --help-kinds: the one-kind solve, the same whether or not the rows name their kind.
    one = run(SolveConfig(data=str(data), budgets=[1, 2], bins=3, binning="uniform", out=str(tmp_path / "a")))
    two = run(SolveConfig(data=str(plain), budgets=[1, 2], bins=3, binning="uniform", out=str(tmp_path / "b")))
    assert one["solutions"] == two["solutions"] and "tiered" not in one
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        ["counts.csv", "discretizer.json", "labels.parquet", "policy_c1.npz", "policy_c2.npz", "solution.json",
         "solve.json"])
    assert json.loads((tmp_path / "a" / "solve.json").read_text()).get("tiered") is None
