"""Nothing half-done is trusted: every stage that reads a collection refuses one whose manifest is missing or
says complete: false, in one line naming the folder and what to do; --allow-incomplete reads it anyway and the
outputs record it (solve.json, provenance.json, helper.json)."""

from __future__ import annotations

import json
import shutil

import pytest
from helper_data import trajectories

from helper.commands.cli import main
from helper.evaluation.methods import SweepContext
from helper.evaluation.sweep import SweepConfig
from trajectories.manifest import IncompleteCollection


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """A finished collection (scored: the simulator's own success probability), 40 episodes."""
    return trajectories(tmp_path_factory.mktemp("collection") / "trajectories", n=40)


def unfinished(collection, root, kind: str):
    """A copy of ``collection`` as a killed collect leaves it (complete: false), or with no manifest."""
    folder = root / kind
    shutil.copytree(collection, folder)
    manifest = folder / "manifest.json"
    if kind == "missing":
        manifest.unlink()
    else:
        manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"complete": False}))
    return folder


def one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


STAGES = {
    "prm train": lambda data, out: ["prm", "train", "--data", data, "--model", "tiny", "--out", out],
    "prm score": lambda data, out: ["prm", "score", "--data", data, "--model", out, "--out", out],
    "prm export": lambda data, out: ["prm", "export", "--data", data, "--out", out + ".jsonl"],
    "solve": lambda data, out: ["solve", "--data", data, "--budgets", "1", "--bins", "3", "--out", out],
}


@pytest.mark.parametrize("kind, said", [("incomplete", "complete: false"), ("missing", "no manifest.json")])
@pytest.mark.parametrize("stage", list(STAGES))
def test_every_stage_refuses_an_unfinished_collection(collection, tmp_path, capsys, stage, kind, said):
    data = unfinished(collection, tmp_path, kind)
    out = tmp_path / "out"
    assert main(STAGES[stage](str(data), str(out))) == 2
    line = one_line(capsys)
    assert line.startswith(f"helpgate {stage}: error: {data}") and said in line and "--allow-incomplete" in line
    assert not out.exists() and not (tmp_path / "out.jsonl").exists()
    # The sweep's training rows (--train-data) are read through the same check.
    context = SweepContext(cfg=SweepConfig(budgets=[0, 1], train_data=str(data)), env=None, out=tmp_path)
    with pytest.raises(IncompleteCollection, match=said):
        context.train_rows()


def test_allow_incomplete_reads_it_and_every_output_says_so(collection, tmp_path, capsys):
    data = unfinished(collection, tmp_path, "incomplete")
    solve = tmp_path / "solve"
    with pytest.warns(UserWarning, match="used anyway"):
        assert main(["solve", "--data", str(data), "--budgets", "1", "--bins", "3", "--out", str(solve),
                     "--allow-incomplete"]) == 0
    record = json.loads((solve / "solve.json").read_text())
    assert record["incomplete_input"] == {"data": str(data), "manifest": "complete: false", "finished_shards": 1}
    assert "--allow-incomplete" in json.loads((solve / "provenance.json").read_text())["stages"]["solve"]["command"]
    capsys.readouterr()
    # A solve of an unfinished collection is not distilled unless that is asked for again.
    helper = tmp_path / "helper"
    assert main(["distill", "--labels", str(solve), "--prm", "none", "--out", str(helper)]) == 2
    line = one_line(capsys)
    assert "solve.json: solved from an unfinished collection" in line and "--allow-incomplete" in line
    assert not (helper / "helper.json").exists()
    assert main(["distill", "--labels", str(solve), "--prm", "none", "--out", str(helper), "--allow-incomplete"]) == 0
    assert json.loads((helper / "helper.json").read_text())["incomplete_input"]["manifest"] == "complete: false"


def test_a_finished_collection_is_read_without_a_word(collection, tmp_path, capsys):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["solve", "--data", str(collection), "--budgets", "1", "--bins", "3",
                     "--out", str(tmp_path / "solve")]) == 0
    assert "incomplete_input" not in json.loads((tmp_path / "solve" / "solve.json").read_text())
