"""A run never overwrites another run or its own input: `--out ''` is refused before any work in every command
that writes, an --out equal to (or inside) the input is refused, and `prm score --out` / `sweep --out` never
write over another collection or another run's finished sweep."""

import os
import shutil

import pytest
from helper_data import HORIZON, solved, tiny_scoring_prm, trajectories

from helper.commands.cli import main
from helper.solve.distill import DistillConfig
from helper.solve.distill import run as distill
from trajectories.shards import mark_complete

PLUGIN = ["--env", "examples.arith_chain:make_episodes", "--agent", "examples.arith_chain:make_agent"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A scored collection, its solve, a helper on no PRM, and a tiny PRM."""
    root = tmp_path_factory.mktemp("built")
    data = trajectories(root / "data", n=60)
    solve = solved(root / "solve", data, budgets=(1,))
    distill(DistillConfig(labels=str(solve), prm="none", out=str(root / "helper")))
    prm = tiny_scoring_prm("state").save(root / "prm")
    return {"data": data, "solve": solve, "helper": root / "helper", "prm": prm, "root": root}


def refused(argv, capsys, named) -> str:
    """``helpgate ARGV`` exits 2 with one line that contains ``named``; returns the line."""
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err, err
    return err


def commands(built, tmp_path):
    """Each command that writes a folder, with inputs it would run on, less --out."""
    data = tmp_path / "data-copy"  # prm score with --out '' would otherwise score the shared folder in place
    shutil.copytree(built["data"], data)
    sweep = ["--helper", str(built["helper"]), "--methods", "never", "--episodes", "2", "--budgets", "0", "1",
             "--questions-per-episode", str(HORIZON)]
    return {
        "collect": ["collect", *PLUGIN, "--episodes", "4", "--shard-size", "2"],
        "solve": ["solve", "--data", str(built["data"]), "--budgets", "1", "--bins", "3"],
        "distill": ["distill", "--labels", str(built["solve"]), "--prm", "none"],
        "evaluate": ["evaluate", "--helper", str(built["helper"]), "--episodes", "2", "--budgets", "0",
                     "--questions-per-episode", str(HORIZON)],
        "prm train": ["prm", "train", "--data", str(built["data"]), "--model", "tiny", "--folds", "2"],
        "prm score": ["prm", "score", "--data", str(data), "--model", str(built["prm"])],
        "sweep": ["sweep", *sweep],
    }


@pytest.mark.parametrize("command", ["collect", "solve", "distill", "evaluate", "prm train", "prm score", "sweep"])
def test_an_empty_out_is_refused_before_any_work(built, tmp_path, capsys, monkeypatch, command):
    argv = commands(built, tmp_path)[command]
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    for out in ("", "  "):
        line = refused([*argv, "--out", out], capsys, ": name the output folder")
        assert "error: out='" in line  # (the one-line report folds the blanks)
    assert os.listdir(here) == []  # nothing written into the current folder


def test_solve_and_prm_train_never_write_into_their_input(built, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(built["data"], data)
    before = sorted(p.name for p in data.rglob("*"))
    for out in (data, data / "solve"):
        refused(["solve", "--data", str(data), "--budgets", "1", "--bins", "3", "--out", str(out)], capsys,
                "own input")
    refused(["prm", "train", "--data", str(data), "--model", "tiny", "--out", str(data)], capsys, "own input")
    assert sorted(p.name for p in data.rglob("*")) == before


def test_prm_score_never_writes_over_another_collection(built, tmp_path, capsys):
    other = tmp_path / "other"
    trajectories(other, n=30, seed=3)  # another collection: same shard name, other episodes
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    refused(["prm", "score", "--data", str(built["data"]), "--model", str(built["prm"]), "--out", str(other)], capsys,
            "holds another collection")
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    refused(["prm", "score", "--data", str(built["data"]), "--model", str(built["prm"]), "--out", str(stray)], capsys,
            "not written by prm score")
    # Scored into a new folder, then again into the same one: ours, so it resumes (nothing left to score).
    scored = tmp_path / "scored"
    data = shutil.copytree(built["data"], tmp_path / "data")
    for _ in range(2):
        capsys.readouterr()
        assert main(["prm", "score", "--data", str(data), "--model", str(built["prm"]), "--out", str(scored)]) == 0
    assert "1 shards already scored" in capsys.readouterr().out
    # A copy of the same collection is still that collection: scoring into it is allowed.
    twin = shutil.copytree(data, tmp_path / "twin")
    assert main(["prm", "score", "--data", str(data), "--model", str(built["prm"]), "--out", str(twin)]) == 0


def test_prm_score_out_a_link_to_its_input_is_refused(built, tmp_path, capsys):
    data = shutil.copytree(built["data"], tmp_path / "data")
    link = tmp_path / "link"
    link.symlink_to(data, target_is_directory=True)
    refused(["prm", "score", "--data", str(data), "--model", str(built["prm"]), "--out", str(link)], capsys,
            "under another name")
    assert not (data / "prm_score.manifest.json").exists()


def test_sweep_never_writes_over_another_runs_finished_sweep(built, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "sweep").mkdir(parents=True)
    (run / "pipeline.json").write_text("{}")
    (run / "sweep" / ".done").write_text('{"seconds": 1}')
    (run / "sweep" / "sweep.csv").write_text("method,budget\n")
    sweep = ["sweep", "--helper", str(built["helper"]), "--methods", "never", "--episodes", "2", "--budgets", "0",
             "--questions-per-episode", str(HORIZON)]
    refused([*sweep, "--out", str(run / "sweep")], capsys, "the finished sweep stage of the pipeline run")
    assert (run / "sweep" / "sweep.csv").read_text() == "method,budget\n"
    assert main([*sweep, "--out", str(run / "sweep-again")]) == 0  # a new folder beside it is the user's


def test_a_bare_folder_of_own_shards_can_be_marked_and_scored(built, tmp_path):
    """(The mark_complete path a user takes for shards written by their own code still scores in place.)"""
    data = shutil.copytree(built["data"], tmp_path / "own")
    (data / "manifest.json").unlink()
    mark_complete(data)
    assert main(["prm", "score", "--data", str(data), "--model", str(built["prm"])]) == 0


@pytest.mark.parametrize("command, into, named", [
    ("solve", "helper", "a helper folder (helper.json is there)"),  # overwrote the helper's policy.npz
    ("solve", "data", "own input"),
    ("solve", "prm", "a PRM folder (prm_config.json is there)"),
    ("distill", "solve", "a solve folder (solve.json is there)"),  # its own input
    ("distill", "data", "a collection folder (manifest.json is there)"),  # Parquet every reader then refused
    ("distill", "prm", "a PRM folder"),
    ("evaluate", "helper", "a helper folder"),
    ("evaluate", "data", "a collection folder"),
    ("sweep", "helper", "a helper folder"),
    ("sweep", "data", "a collection folder"),
    ("prm train", "solve", "a solve folder"),
    ("prm train", "helper", "a helper folder"),
])
def test_out_another_commands_folder_is_refused_before_any_work(built, tmp_path, capsys, command, into, named):
    """Each command that writes a folder refuses --out a folder another kind of command wrote (a link to it too)."""
    target = tmp_path / into
    shutil.copytree(built[into], target)
    argv = commands(built, tmp_path)[command]
    argv = [target if a == str(built[into]) else a for a in argv]  # the copy is the input where it is one
    before = sorted(p.relative_to(target) for p in target.rglob("*"))
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    refused([*map(str, argv), "--out", str(link)], capsys, named)
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == before


@pytest.mark.parametrize("command", ["solve", "distill", "evaluate", "sweep", "prm train"])
def test_out_inside_a_helper_folder_is_refused(built, tmp_path, capsys, command):
    helper = tmp_path / "helper"
    shutil.copytree(built["helper"], helper)
    refused([*commands(built, tmp_path)[command], "--out", str(helper / ".." / "helper" / "sub")], capsys,
            f"is inside {helper.resolve()}, a helper folder")
    assert not (helper / "sub").exists()


def test_every_command_names_a_folder_its_config_has():
    """A finished command records its provenance in the folder ``RECORDED_IN`` names (``out`` by default): every
    command but the servers and the report must name at least one field its config has, or it records nothing."""
    import dataclasses
    import importlib

    from helper.commands.cli import COMMANDS, RECORDED_IN

    for path, (module, config, *_) in COMMANDS.items():
        fields = {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), config))}
        recorded = RECORDED_IN.get(path, ("out",))
        if path in (("serve",), ("serve-gate",), ("report",)):
            assert recorded == (), path
            continue
        assert recorded and set(recorded) <= fields, (path, recorded, sorted(f for f in fields if "out" in f))


@pytest.mark.parametrize("command", [["agile", "sft"], ["agile", "ppo"], ["agile", "eval"]])
def test_agile_commands_take_out_and_name_it_for_the_old_spelling(command, tmp_path, capsys):
    """The AGILE commands write where every command writes, ``--out``; their older ``--out-dir`` is refused in one
    line naming it."""
    from helper.commands.cli import main

    assert main([*command, "--out-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out-dir was renamed: use --out" in err
    import dataclasses
    import importlib

    from helper.commands.cli import COMMANDS

    module, config, *_ = COMMANDS[tuple(command)]
    names = {f.name for f in dataclasses.fields(getattr(importlib.import_module(module), config))}
    assert "out" in names and "out_dir" not in names
