"""benchmarks/setups/auroc_intervals.py on the committed runs: every PRM's AUROC recomputed from its kept out-of-fold
rows is the one its metrics.json reports, inside its interval over task groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm.training.quality import clustered_auroc_interval
from tests.imports import benchmark_module

REPO = Path(__file__).resolve().parents[2]
intervals = benchmark_module("auroc_intervals")


@pytest.mark.parametrize("run", ["benchmarks/data/main-cf/seed0", "benchmarks/data/rapids/seed0",
                                 "benchmarks/data/rapids/seed2"])
def test_kept_rows_give_the_reported_auroc(run):
    folders = intervals.prm_folders(REPO / run)
    assert folders
    for folder in folders:
        rows = intervals.oof_rows(folder)  # the kept rows: no trajectories in the repository
        area, low, high = clustered_auroc_interval(rows["score"].to_numpy(), rows["target"].to_numpy() >= 0.5,
                                                   rows["group"].to_list())
        reported = json.loads((folder / "prm" / "metrics.json").read_text())["oof_auroc"]
        assert area == pytest.approx(reported, abs=1e-9)
        assert low < area < high


def test_printed_table(capsys):
    intervals.main([str(REPO / "benchmarks/data/main-cf/seed0")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5 and lines[1].split()[-3:] == ["0.514", "[0.310,", "0.717]"]
