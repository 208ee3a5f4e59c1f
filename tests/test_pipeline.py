"""`helpgate pipeline` end to end on the simulator agent and a tiny PRM, then resumed."""

import json

import polars as pl

from helper.cli import main
from helper.pipeline import STAGES


def test_pipeline_runs_every_stage_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["pipeline", "--out", str(out), "--quick", "--agent", "simulator", "--prm-model", "tiny",
            "--episodes", "32", "--eval-episodes", "8", "--questions-per-episode", "4", "--max-budget", "2"]
    assert main(args) == 0
    for stage in STAGES:
        assert (out / stage / ".done").exists(), stage
    sweep = pl.read_csv(out / "sweep" / "sweep.csv")
    assert sweep.columns == ["method", "budget", "success", "interventions", "episodes", "ci_low", "ci_high"]
    helper = sweep.filter(pl.col("method") == "helper")
    assert sorted(helper["budget"].to_list()) == [0, 1, 2]
    assert (helper["interventions"] <= helper["budget"]).all()
    assert ((sweep["success"] >= 0) & (sweep["success"] <= 1)).all()
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert "helper" in json.dumps(summary)
    assert (out / "sweep" / "sweep.png").stat().st_size > 0

    capsys.readouterr()
    assert main(args) == 0  # every stage is marked finished: nothing is redone
    printed = capsys.readouterr().out
    assert all(f"{stage}: already finished" in printed for stage in STAGES)
