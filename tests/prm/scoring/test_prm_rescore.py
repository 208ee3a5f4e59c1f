"""A re-score with another PRM cut off between shards: readers of the scores refuse the folder (two PRMs, or a
shard left pending), and a resumed `prm score` finishes it with one PRM."""

import json

import polars as pl
import pytest
import torch

import prm.scoring.score as score
from helper.commands.cli import main
from prm.data.synthetic import synthetic_frame
from prm.scoring.score import MANIFEST, ScoreConfig, run_score
from helper.gates.identity import prm_fingerprint
from prm.verifiers.model import ProcessRewardModel
from trajectories.schema import SchemaError
from trajectories.shards import mark_complete, read_trajectories

SOLVE_NEEDS = ("episode_id", "step", "intervened", "budget_left", "reward", "done", "prm_score")


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def prms(tmp_path_factory):
    """Two PRMs, X and Y: the tiny backbone with two random value heads."""
    folders = []
    for seed in (0, 1):
        prm = ProcessRewardModel.create("tiny", head="value")
        torch.manual_seed(seed)
        torch.nn.init.normal_(prm.head.linear.weight, std=1.0)
        folders.append(prm.save(tmp_path_factory.mktemp(f"prm{seed}")))
    return folders


def collection(folder, n=3):
    folder.mkdir(parents=True)
    for s in range(n):
        frame = synthetic_frame(episodes=6, seed=s)
        # Some interventions, for the solve to estimate their effect: the first step of every other episode.
        helped = (pl.col("step") == 0) & pl.col("episode_id").str.contains(r"[13579]$")
        frame.with_columns(helped.alias("intervened")).write_parquet(folder / f"part-{s:03d}.parquet")
    mark_complete(folder)
    return folder


def cut_after(monkeypatch, shards: int):
    """Interrupt `prm score` (as Ctrl-C does) when it starts scoring the shard after ``shards`` finished ones."""
    original, done = score.score_shard, []

    def cut(*args, **kwargs):
        if len(done) >= shards:
            raise KeyboardInterrupt
        done.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(score, "score_shard", cut)


def solve(data, out, capsys) -> tuple[int, str]:
    capsys.readouterr()  # what scoring printed
    code = main(["solve", "--data", str(data), "--budgets", "1", "--bins", "2", "--out", str(out)])
    return code, capsys.readouterr().err.strip()


def entries(data) -> dict:
    return json.loads((data / MANIFEST).read_text())["shards"]


def test_a_rescore_cut_between_shards_is_refused_until_one_prm_finishes_it(tmp_path, prms, monkeypatch, capsys):
    x, y = prms
    data = collection(tmp_path / "data")
    run_score(ScoreConfig(data=str(data), model=str(x), progress=False))
    cut_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        run_score(ScoreConfig(data=str(data), model=str(y), progress=False))  # shard 0 by Y, then cut
    monkeypatch.undo()
    code, err = solve(data, tmp_path / "solve", capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "two PRMs" in err and "part-00" in err, err
    assert not (tmp_path / "solve" / "solve.json").exists()
    by = {name: e["prm"] for name, e in entries(data).items()}  # each shard names the PRM that scored it
    assert by == {"part-000.parquet": prm_fingerprint(y), "part-001.parquet": prm_fingerprint(x),
                  "part-002.parquet": prm_fingerprint(x)}
    # Resumed with Y, it scores only what Y did not, and the folder is Y's alone.
    summary = run_score(ScoreConfig(data=str(data), model=str(y), progress=False))
    assert summary["scored"] == 2 and summary["skipped"] == 1
    assert {e["prm"] for e in entries(data).values()} == {prm_fingerprint(y)}
    code, err = solve(data, tmp_path / "solve", capsys)
    assert code == 0, err
    # Resumed with X instead, every shard is X's again: never a mix.
    assert run_score(ScoreConfig(data=str(data), model=str(x), progress=False))["scored"] == 3
    assert {e["prm"] for e in entries(data).values()} == {prm_fingerprint(x)}


def test_a_kill_after_a_shard_was_rewritten_leaves_it_pending_until_the_rerun(tmp_path, prms, monkeypatch, capsys):
    x, y = prms
    data = collection(tmp_path / "data", n=2)
    run_score(ScoreConfig(data=str(data), model=str(x), progress=False))
    original = score.record
    monkeypatch.setattr(score, "record", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run_score(ScoreConfig(data=str(data), model=str(y), progress=False))
    monkeypatch.setattr(score, "record", original)
    assert entries(data)["part-000.parquet"] == {"prm": prm_fingerprint(y), "pending": True}
    with pytest.raises(SchemaError, match=r"part-000\.parquet: prm score stopped while scoring it"):
        read_trajectories(data, require=SOLVE_NEEDS)
    code, err = solve(data, tmp_path / "solve", capsys)
    assert code == 2 and "pending" in err
    assert run_score(ScoreConfig(data=str(data), model=str(y), progress=False))["scored"] == 2
    assert read_trajectories(data, require=SOLVE_NEEDS).height > 0


def test_a_manifest_naming_two_prms_is_refused_by_a_reader_of_scores(tmp_path, prms):
    x, _ = prms
    data = collection(tmp_path / "data", n=2)
    run_score(ScoreConfig(data=str(data), model=str(x), progress=False))
    manifest = json.loads((data / MANIFEST).read_text())
    manifest["shards"]["part-001.parquet"]["prm"] = "sha256:" + "0" * 64  # as a re-score cut off leaves it
    (data / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SchemaError, match=r"part-001\.parquet: scored by PRM sha256:0+…, but part-000\.parquet by"):
        read_trajectories(data, require=SOLVE_NEEDS)
    assert read_trajectories(data).height > 0  # the collection itself (prm train reads it) is sound


def test_a_model_folder_that_is_no_prm_leaves_no_manifest_in_out(tmp_path, capsys):
    """`prm score --model` a helper (or any other) folder wrote prm_score.manifest.json, recording the fingerprint of
    nothing, before the model failed to load."""
    data = collection(tmp_path / "data", n=1)
    other = tmp_path / "helper"
    other.mkdir()
    (other / "helper.json").write_text("{}")
    capsys.readouterr()
    assert main(["prm", "score", "--data", str(data), "--model", str(other), "--out", str(tmp_path / "scored")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{other / 'prm_config.json'} not found" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "scored").exists()


def test_a_shard_it_cannot_score_is_refused_before_any_file_is_written(tmp_path, prms, capsys):
    """A null state_text in the second shard was refused only when that shard's turn came: prm score had written its
    manifest (and scored the first shard) into --out by then."""
    data = collection(tmp_path / "data", n=2)
    shard = data / "part-001.parquet"
    frame = pl.read_parquet(shard)
    frame.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise(pl.col("state_text"))
                       .alias("state_text")).write_parquet(shard)
    mark_complete(data)
    capsys.readouterr()
    assert main(["prm", "score", "--data", str(data), "--model", str(prms[0]), "--out", str(tmp_path / "scored")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{shard}: column 'state_text' has 1 null values" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "scored").exists()
