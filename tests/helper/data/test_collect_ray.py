"""``collect-offline-trajectories --ray`` on a local Ray cluster: the same folder as the in-process
run with the same seed, and a lost shard is redone on resume."""

from __future__ import annotations

import json
import sys

import pytest

from agile.envs.catalog_generator import default_catalog_dir
from helper.data.collect import CollectConfig, main, run
from helper.stored_config import config_of
from trajectories.manifest import MANIFEST
from trajectories.shards import read_trajectories

try:
    import ray
except ImportError:
    ray = None


def small(out, **changes) -> CollectConfig:
    values = dict(data=str(default_catalog_dir(seed=0)), out=str(out), episodes=10, questions_per_episode=4,
                  shard_size=3, batch_size=2, budget=2, explore_p=[0.0, 0.5, 1.0], seed=7)
    return config_of(CollectConfig, values | changes)


@pytest.mark.skipif(
    ray is None, reason="ray is not installed (pip install 'helpgate[ray]'); the Ray collection test is skipped"
)
def test_ray_collection_matches_in_process_and_resumes(tmp_path):
    local = tmp_path / "local"
    run(small(local))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        spread = tmp_path / "ray"
        summary = run(small(spread, ray=True))
        assert summary["episodes"] == 10
        keys = ["episode_id", "step"]
        expected = read_trajectories(local).sort(keys)
        assert read_trajectories(spread).sort(keys).equals(expected)
        manifest = json.loads((spread / MANIFEST).read_text())
        assert manifest["complete"] and manifest["shards"] == json.loads((local / MANIFEST).read_text())["shards"]
        # A shard lost (as by a kill before it was written) is redone by the next --ray run, alone.
        (spread / "shard-00002.parquet").unlink()
        untouched = (spread / "shard-00001.parquet").stat().st_mtime_ns
        run(small(spread, ray=True, ray_workers=1))
        assert (spread / "shard-00001.parquet").stat().st_mtime_ns == untouched
        assert read_trajectories(spread).sort(keys).equals(expected)
    finally:
        ray.shutdown()


def test_ray_flag_without_ray_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as on a machine without the extra
    assert main(["--data", str(default_catalog_dir(seed=0)), "--out", str(tmp_path / "t"), "--episodes", "2",
                 "--questions-per-episode", "2", "--ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'helpgate[ray]'" in err
