"""benchmarks/setups/judge_vs_play.py: the judge's readings are the member selection's own (the pipeline's choice is
reproduced from the kept training rows), the played figures are the kept sweep's, and the logged rows are counted
by their early interventions exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import polars as pl

from tests.imports import benchmark_module

judge_vs_play = benchmark_module("judge_vs_play")
RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tw-llm-gpu" / "seed1"


def test_the_pipelines_choice_and_play_are_read_back():
    rows = judge_vs_play.read_run(RUN, [1, 2, 3, 4])
    kept = json.loads((RUN / "helper" / "members" / "selection.json").read_text())["chosen"]
    played = pd.read_csv(RUN / "sweep" / "sweep.csv").set_index(["method", "budget"])["success"]
    for row in rows:
        c = row["C"]
        assert row["chosen"] == kept[str(c)]["member"]["name"]
        assert abs(row["judge_chosen"] - kept[str(c)]["cross_fitted_success"]) < 1e-6
        assert row["played_helper"] == played[("helper", c)] and row["played_first_k"] == played[("first_k", c)]
        assert 0.0 <= row["judge_first_k"] <= 1.0


def test_early_interventions_are_counted_per_episode():
    counted = judge_vs_play.early_help(RUN, 4)
    rows = pl.read_parquet(RUN / "solve" / "labels.parquet")
    assert counted.height == rows["episode_id"].n_unique()
    one = counted.row(0, named=True)
    own = rows.filter((pl.col("episode_id") == one["episode_id"]) & (pl.col("step") < 4))
    assert one["early"] == min(int(own["intervened"].sum()), 3)
