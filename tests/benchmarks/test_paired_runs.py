"""benchmarks/setups/paired_runs.py: the difference it prints is the after run's success minus the before run's on the
same held-out episodes, and runs of different seeds are refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.imports import benchmark_module

paired_runs = benchmark_module("paired_runs")
KEPT = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tw-hard"


def test_the_difference_is_paired_per_episode(capsys):
    before, after = KEPT / "before" / "seed2", KEPT / "aligned" / "seed2"
    paired_runs.main(["--before", str(before), "--after", str(after), "--methods", "helper", "first_k"])
    out = capsys.readouterr().out
    a, b = (pd.read_csv(r / "sweep" / "episodes.csv").query("method == 'helper' and budget == 4") for r in (after, before))
    both = a.merge(b, on="episode_id", suffixes=("_a", "_b"))
    expected = (both["success_a"] - both["success_b"]).mean()
    assert f"C=4: {expected:+.3f}" in out
    assert "first_k" in out and "1 seeds" in out


def test_runs_of_other_seeds_are_refused():
    with pytest.raises(SystemExit, match="same seeds"):
        paired_runs.main(["--before", str(KEPT / "before" / "seed1"), "--after", str(KEPT / "aligned" / "seed2")])
