"""`helpgate pipeline --redo` killed after its first stage: the next run never skips stages made with the old
settings while pipeline.json names the new ones (it redoes them or refuses)."""

import json

import prm.training.train as prm_train
from helper.commands.cli import main
from helper.commands.pipeline import STAGES

TINY = ["pipeline", "--quick", "--agent", "simulator", "--prm-model", "tiny", "--episodes", "16", "--eval-episodes",
        "4", "--questions-per-episode", "3", "--budgets", "1", "--methods", "helper", "--prm-folds", "1"]
"""A tiny pipeline; --prm-folds and --bins are experiment options, so it runs on the experiment entry's line."""


def solved_bins(out) -> int:
    return json.loads((out / "solve" / "solution.json").read_text())["config"]["bins"]


def test_a_redo_killed_after_its_first_stage_leaves_no_stage_of_the_old_settings(tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert main([*TINY, "--out", str(out)], experiments=True) == 0
    assert solved_bins(out) == 6 and all((out / stage / ".done").exists() for stage in STAGES)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the redo is stopped in its second stage, the PRM's

    monkeypatch.setattr(prm_train, "run_train", killed)
    try:  # the command reports Ctrl-C in one line and exits non-zero (or lets it through)
        code = main([*TINY, "--out", str(out), "--redo", "--bins", "3"], experiments=True)
    except KeyboardInterrupt:
        code = None
    assert code != 0
    monkeypatch.undo()
    assert json.loads((out / "pipeline.json").read_text())["bins"] == 3
    # Only the stage the redo finished is marked finished: no marker outlives the settings it was made with.
    assert [stage for stage in STAGES if (out / stage / ".done").exists()] == ["collect"]

    code = main([*TINY, "--out", str(out), "--bins", "3"], experiments=True)  # the same, without --redo
    assert code == 0 and solved_bins(out) == json.loads((out / "pipeline.json").read_text())["bins"] == 3


def test_an_unknown_env_is_refused_before_pipeline_json_is_written(tmp_path, capsys):
    """A pipeline with an unknown env (or a plug-in factory its module lacks) wrote pipeline.json before the env was
    refused, so the corrected rerun was held to the mistaken settings."""
    for n, env in enumerate(["minecraft", "examples.arith_chain:nope"]):
        out = tmp_path / f"run{n}"
        assert main(["pipeline", "--env", env, "--agent", "examples.arith_chain:make_agent", "--out", str(out)]) == 2
        assert env in capsys.readouterr().err
        assert not (out / "pipeline.json").exists()
