"""The frozen backbone's feature cache, shared by the folds of a cross-fit: no fold drops what another reads."""

from __future__ import annotations

import numpy as np
import polars as pl

from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, load_features, run_train
from trajectories.shards import mark_complete


def _data(root, frame: pl.DataFrame):
    root.mkdir()
    frame.write_parquet(root / "part-000.parquet")
    mark_complete(root)
    return str(root)


def test_a_fold_keeps_the_other_folds_episodes_in_the_cache(tmp_path, one_torch_thread, capsys):
    frame = synthetic_frame(episodes=24, steps=2, p_good=0.5, seed=7)
    ids = frame["episode_id"].unique(maintain_order=True).to_list()
    first, second = ids[:16], ids[8:]  # two folds' training episodes, 8 in common
    cache = tmp_path / "features.npz"
    common = {"model": "tiny", "target": "hard", "progress": False, "feature_cache": str(cache)}
    for name, kept in (("a", first), ("b", second)):
        data = _data(tmp_path / f"data-{name}", frame.filter(pl.col("episode_id").is_in(kept)))
        run_train(TrainConfig(data=data, out=str(tmp_path / f"prm-{name}"), **common))
    assert "features of 16 episodes (8 from the cache)" in capsys.readouterr().out
    assert set(load_features(cache, None, None)) == set(ids)  # the union, not the last fold's
    again = _data(tmp_path / "data-c", frame.filter(pl.col("episode_id").is_in(first)))
    run_train(TrainConfig(data=again, out=str(tmp_path / "prm-c"), **common))
    assert "features of 16 episodes (16 from the cache)" in capsys.readouterr().out
    stored = load_features(cache, None, None)
    assert all(np.isfinite(x).all() for _, x in stored.values())
