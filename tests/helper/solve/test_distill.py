"""Distillation end to end: simulated data -> solve -> distill (features and text) -> HelperGate."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from helper_data import HORIZON, PerfectScorer, solved, trajectories

from helper import HelperGate
from helper.solve.distill import DistillConfig, expand_labels, held_out_mask, load_solution, run
from trajectories.number_maps import number_maps


@pytest.fixture(scope="module")
def solve_dir(tmp_path_factory):
    data = trajectories(tmp_path_factory.mktemp("trajectories"))
    return solved(tmp_path_factory.mktemp("solve"), data)


def test_expand_labels_covers_every_budget_left(solve_dir):
    _, solution = load_solution(solve_dir)
    logged = pl.read_parquet(solve_dir / "labels.parquet")
    expanded = expand_labels(logged, solution)
    assert expanded.height == 2 * logged.height
    assert sorted(expanded["budget_left"].unique().to_list()) == [1, 2]
    # Rows logged with budget_left = 2 keep the solver's own label at b = 2.
    again = expanded.filter(pl.col("budget_left") == 2)["optimal_intervene"].to_list()
    assert again == logged.with_columns(pl.col("budget_left").clip(0, 2)).pipe(
        lambda f: expand_labels(f, solution)).filter(pl.col("budget_left") == 2)["optimal_intervene"].to_list()


def test_split_is_by_episode():
    ids = pl.Series([f"e{i // 4}" for i in range(400)])
    mask = held_out_mask(ids, 0.25, seed=0)
    frame = pl.DataFrame({"e": ids, "m": mask})
    assert frame.group_by("e").agg(pl.col("m").n_unique())["m"].max() == 1  # no episode on both sides
    assert 0.1 < mask.mean() < 0.4


def test_features_backend_agrees_and_gate_loads(solve_dir, tmp_path):
    out = tmp_path / "helper"
    summary = run(DistillConfig(labels=str(solve_dir), prm="none", out=str(out), model="gbm"))
    test = summary["report"]["test"]
    assert test["agreement"] >= 0.95 and test["balanced_accuracy"] >= 0.9
    assert set(test["by_budget_left"]) == {1, 2}
    # The training calls are the logged rows' human answers (the simulator's data has no strong actor).
    logged = pl.read_parquet(solve_dir / "labels.parquet")
    humans = logged.filter(pl.col("intervened") & (pl.col("actor") == "human")).height
    assert summary["training_calls"] == {"strong": 0, "human": humans, "episodes": logged["episode_id"].n_unique(),
                                         "rows": logged.height} and humans > 0
    config = json.loads((out / "helper.json").read_text())
    assert config["solved_budget"] == 2 and config["prm"] is None
    gate = HelperGate.load(out)
    assert gate.budget == 2 and gate.scorer is None
    # With a perfect scorer the features classifier reproduces the solved table.
    gate.scorer = PerfectScorer()
    table = HelperGate.load(out, backend="table")
    table.scorer = gate.scorer
    rows = pl.read_parquet(solve_dir / "labels.parquet").head(200)
    from agile.protocol import Observation

    same = []
    for row, features in zip(rows.iter_rows(named=True), number_maps(rows["features"])):
        o = Observation(row["episode_id"], "productqa", row["task_id"], row["step"], row["state_text"], HORIZON,
                        features)
        for b in (1, 2):
            same.append((gate.intervene_probability(o, b) >= 0.5) == (table.intervene_probability(o, b) >= 0.5))
    assert np.mean(same) >= 0.95


def test_logreg_and_refusals(solve_dir, tmp_path):
    summary = run(DistillConfig(labels=str(solve_dir), prm="none", out=str(tmp_path / "lr"), model="logreg"))
    assert summary["report"]["test"]["agreement"] > 0.7
    with pytest.raises(FileNotFoundError, match="prm_config.json"):
        run(DistillConfig(labels=str(solve_dir), prm=str(tmp_path / "missing"), out=str(tmp_path / "x")))
    with pytest.raises(FileNotFoundError, match="labels.parquet"):
        run(DistillConfig(labels=str(tmp_path), prm="none", out=str(tmp_path / "x")))


def test_text_backend_tiny_model(solve_dir, tmp_path):
    out = tmp_path / "text"
    summary = run(DistillConfig(labels=str(solve_dir), prm="none", out=str(out), backend="text", text_model="tiny",
                                text_epochs=1, text_lr=1e-3, text_max_length=64, max_rows=64))
    assert 0.0 <= summary["report"]["test"]["agreement"] <= 1.0
    gate = HelperGate.load(out, budget=1)
    assert gate.backend == "text"
    from agile.protocol import Observation

    o = Observation("t", "productqa", "q", 0, "Question 1 of 6 (fact_qa).", HORIZON, {})
    p = gate.intervene_probability(o, 1)
    assert 0.0 <= p <= 1.0
    assert gate.intervene_probability(o, 1) == pytest.approx(p)  # loaded model is deterministic
