"""`prm score`: adds prm_score in place or to a folder, atomically, and resumes finished shards."""

import json

import numpy as np
import polars as pl
import pytest
import torch

from prm.data.episodes import episodes_of
from prm.verifiers.load import load_prm
from prm.verifiers.model import ProcessRewardModel
from prm.scoring.score import MANIFEST, ScoreConfig, run_score
from prm.data.synthetic import synthetic_frame
from trajectories.schema import SchemaError
from trajectories.shards import mark_complete
from trajectories.shards import read_trajectories


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    prm = ProcessRewardModel.create("tiny", head="value")
    torch.manual_seed(0)
    torch.nn.init.normal_(prm.head.linear.weight, std=1.0)
    return prm.save(tmp_path_factory.mktemp("prm"))


_MODELS = {}


def _loaded(model_dir):
    if model_dir not in _MODELS:
        _MODELS[model_dir] = load_prm(model_dir)
    return _MODELS[model_dir]


def _write_shards(folder, n=3):
    folder.mkdir(parents=True, exist_ok=True)
    frames = [synthetic_frame(episodes=6, seed=s) for s in range(n)]
    for s, frame in enumerate(frames):
        # rows out of order: scoring must put every score back on its own row
        frame.sample(fraction=1.0, shuffle=True, seed=s).write_parquet(folder / f"part-{s:03d}.parquet")
    mark_complete(folder)
    return frames


def _expected(model_dir, frame):
    ids, episodes = episodes_of(frame)
    scores = _loaded(model_dir).score_episodes(episodes)
    return {(i, t): float(s) for i, ep in zip(ids, scores) for t, s in enumerate(ep)}


def test_scores_in_place_and_resumes(tmp_path, model_dir):
    data = tmp_path / "data"
    frames = _write_shards(data)
    cfg = ScoreConfig(data=str(data), model=str(model_dir), progress=False)
    summary = run_score(cfg)
    assert summary["scored"] == 3 and summary["skipped"] == 0 and summary["tokens"] > 0
    for s, frame in enumerate(frames):
        scored = pl.read_parquet(data / f"part-{s:03d}.parquet")
        assert scored.height == frame.height and "prm_score" in scored.columns
        expected = _expected(model_dir, frame)
        got = {(r["episode_id"], r["step"]): r["prm_score"] for r in scored.iter_rows(named=True)}
        assert got.keys() == expected.keys()
        np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), atol=1e-6)
    manifest = json.loads((data / MANIFEST).read_text())
    assert sorted(manifest["shards"]) == ["part-000.parquet", "part-001.parquet", "part-002.parquet"]

    # A killed run: shard 1 was being rewritten (marked pending). Resume scores only it.
    manifest["shards"]["part-001.parquet"] = {"prm": manifest["config"]["prm"], "pending": True}
    (data / MANIFEST).write_text(json.dumps(manifest))
    untouched = (data / "part-000.parquet").stat().st_mtime_ns
    summary = run_score(cfg)
    assert summary["scored"] == 1 and summary["skipped"] == 2
    assert (data / "part-000.parquet").stat().st_mtime_ns == untouched
    assert pl.read_parquet(data / "part-001.parquet").columns.count("prm_score") == 1
    assert run_score(cfg)["scored"] == 0
    assert not list(data.glob(".*.tmp"))  # no temp files left behind


def test_output_folder_leaves_input_untouched(tmp_path, model_dir):
    data, out = tmp_path / "data", tmp_path / "scored"
    _write_shards(data, n=2)
    before = {p.name: p.read_bytes() for p in data.glob("*.parquet")}
    run_score(ScoreConfig(data=str(data), model=str(model_dir), out=str(out), progress=False))
    assert {p.name: p.read_bytes() for p in data.glob("*.parquet")} == before
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(before)
    assert (out / MANIFEST).exists() and not (data / MANIFEST).exists()
    # The collection's manifest goes beside the scored shards: later stages read them as the finished collection.
    assert (out / "manifest.json").read_bytes() == (data / "manifest.json").read_bytes()
    assert read_trajectories(out).height == sum(pl.read_parquet(p).height for p in data.glob("*.parquet"))


def test_bad_shard_names_file_and_column(tmp_path, model_dir):
    data = tmp_path / "data"
    data.mkdir()
    synthetic_frame(episodes=2).drop("action_text").write_parquet(data / "broken.parquet")
    (data / "manifest.json").write_text('{"complete": true, "shards": {}}')  # a finished collection, bad shard
    with pytest.raises(SchemaError, match=r"broken\.parquet: missing column 'action_text'"):
        run_score(ScoreConfig(data=str(data), model=str(model_dir), progress=False))
    split = synthetic_frame(episodes=2, steps=3).filter(pl.col("step") != 1)
    split.write_parquet(data / "broken.parquet")
    with pytest.raises(SchemaError, match=r"broken\.parquet: episode .* has steps \[0, 2\]"):
        run_score(ScoreConfig(data=str(data), model=str(model_dir), progress=False))


def test_partitioned_input_and_output_inside_it(tmp_path, model_dir):
    """Shards in sub-folders keep their layout; an --out inside --data is never read as input."""
    data = tmp_path / "data"
    _write_shards(data / "env=a", n=1)
    _write_shards(data, n=1)  # its manifest lists both folders' shards
    out = data / "scored"
    cfg = ScoreConfig(data=str(data), model=str(model_dir), out=str(out), progress=False)
    assert run_score(cfg)["scored"] == 2
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet")) == [
        "env=a/part-000.parquet", "part-000.parquet"]
    again = run_score(cfg)
    assert again["scored"] == 0 and again["skipped"] == 2
    assert sorted(json.loads((out / MANIFEST).read_text())["shards"]) == ["env=a/part-000.parquet",
                                                                           "part-000.parquet"]
