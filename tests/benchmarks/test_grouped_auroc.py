"""The verifier benchmarks' AUROC under resampling: a weighted AUROC is the AUROC of the rows repeated,
and the pooled table's intervals hold its point values."""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm.training import quality
from tests.imports import benchmark_module

grouped = benchmark_module("grouped_auroc")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1), st.integers(0, 3)), min_size=2, max_size=25))
def test_weighted_auroc_is_the_auroc_of_the_rows_repeated(rows):
    score = np.array([r[0] for r in rows], dtype=float)  # few values: ties on purpose
    outcome = np.array([r[1] for r in rows], dtype=float)
    weight = np.array([r[2] for r in rows])
    repeated = np.repeat(np.arange(len(rows)), weight)
    expected = quality.auroc(score[repeated], outcome[repeated])
    found = grouped.weighted_auroc(score, outcome, weight)
    assert (np.isnan(found) and np.isnan(expected)) or found == pytest.approx(expected)


def test_hand_computed_auroc_and_paired_difference():
    # Two episodes of two rows each, in two groups; "perfect" ranks every right row above every wrong one.
    frame = pl.DataFrame({"episode_id": ["a", "a", "b", "b", "c", "c"], "group": ["g", "g", "g", "g", "h", "h"],
                          "outcome": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
                          "perfect": [0.9, 0.1, 0.8, 0.2, 0.7, 0.3], "backwards": [0.1, 0.9, 0.2, 0.8, 0.3, 0.7]})
    found = grouped.intervals(frame, ["perfect", "backwards"], ["group"])
    assert found["perfect"]["auroc"] == 1.0 and found["backwards"]["auroc"] == 0.0
    assert found["perfect"]["ci"] == (1.0, 1.0) and found["backwards"]["ci"] == (0.0, 0.0)
    assert found["backwards"]["diff"] == -1.0 and found["backwards"]["diff_ci"] == (-1.0, -1.0)


def test_the_pooled_interval_holds_the_seeds_and_names_a_missing_score(tmp_path):
    table = benchmark_module("auroc_table")
    rng = np.random.default_rng(0)
    for seed in range(2):
        n = 40
        outcome = rng.integers(0, 2, n).astype(float)
        folder = tmp_path / f"s{seed}"
        folder.mkdir()
        pl.DataFrame({"episode_id": [f"e{i // 2}" for i in range(n)], "step": [i % 2 for i in range(n)],
                      "group": [f"g{i % 4}" for i in range(n)], "outcome": outcome,
                      "signal": outcome + rng.normal(0, 0.7, n), "noise": rng.normal(0, 1, n)}
                     ).write_parquet(folder / "scores.parquet")
    report = table.main([str(tmp_path / "s0"), str(tmp_path / "s1"), "--names", "signal", "noise"])
    pooled = report["pooled"]["signal"]
    assert pooled["ci"][0] <= pooled["auroc"] <= pooled["ci"][1]
    assert set(report) == {str(tmp_path / "s0"), str(tmp_path / "s1"), "pooled"}
    with pytest.raises(SystemExit, match="not a score"):
        table.main([str(tmp_path / "s0"), "--names", "PRM"])


def test_rank_mean_of_a_score_with_itself_ranks_as_the_score_and_of_two_is_their_mean_rank():
    table = benchmark_module("auroc_table")
    frame = pl.DataFrame({"a": [0.1, 0.4, 0.3, 0.9], "b": [4.0, 3.0, 2.0, 1.0], "outcome": [0.0, 1.0, 0.0, 1.0]})
    same, name = table.with_rank_mean(frame, ["a", "a"])
    assert name == "a (+) a"
    assert quality.auroc(same[name].to_numpy(), frame["outcome"].to_numpy()) == quality.auroc(frame["a"], frame["outcome"])
    both, name = table.with_rank_mean(frame, ["a", "b"])
    # ranks of a: 1, 3, 2, 4; of b: 4, 3, 2, 1; over 4 rows, averaged
    assert both[name].to_list() == pytest.approx([(1 + 4) / 8, (3 + 3) / 8, (2 + 2) / 8, (4 + 1) / 8])


def test_data_size_pairs_each_runs_rows_under_its_own_and_the_pooled_prm(tmp_path, monkeypatch):
    size = benchmark_module("data_size")
    monkeypatch.setattr(sys.modules["benchmarks.verifier.grouped_auroc"], "RESAMPLES", 200)  # the one it imported
    rng = np.random.default_rng(1)
    runs = [tmp_path / f"s{i}" for i in range(2)]
    outcome = {run: rng.integers(0, 2, 24).astype(float) for run in runs}

    def finished(subset, noise):
        rows = [pl.DataFrame({"episode_id": [f"{run.name}-e{i // 2}" for i in range(24)],
                              "step": [i % 2 for i in range(24)], "task_id": [f"g{i % 3}/q{i}" for i in range(24)],
                              "outcome": outcome[run], "used": True,
                              "prm_score": outcome[run] + rng.normal(0, noise, 24)}) for run in subset]
        folder = tmp_path / "out" / size.subset_name(subset)
        folder.mkdir(parents=True)
        pl.concat(rows).write_parquet(folder / "validation_scores.parquet")

    # Finished subsets are read back, never trained again (no pipeline.json exists to train from).
    finished((runs[0],), 2.0)
    finished((runs[1],), 2.0)
    finished(tuple(runs), 0.01)
    sizes, found = size.size_table(runs, tmp_path / "out")
    assert "| 2 | 24 | s0+s1 1.000 | **1.000** |" in sizes
    paired = size.paired_table(runs, found).splitlines()
    assert [line.split(" | ")[0] for line in paired[2:]] == ["| s0", "| s1", "| pooled"]
    # The pooled PRM ranks every run's rows perfectly: its interval sits at 1 and its difference is positive.
    assert all("1.000 [1.000, 1.000]" in line for line in paired[2:])
    assert all(line.split(" | ")[3].startswith("+") for line in paired[2:])
