"""`prm score --ray` on a local Ray cluster gives the same scores as the in-process run."""

import numpy as np
import polars as pl
import pytest
import torch

from prm.data.episodes import OOF_FILE
from prm.data.labels import add_labels
from prm.verifiers.model import ProcessRewardModel
from prm.scoring.score import ScoreConfig, run_score
from prm.data.synthetic import synthetic_frame
from trajectories.shards import mark_complete

try:
    import ray
except ImportError:
    ray = None


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@pytest.mark.skipif(
    ray is None, reason="ray is not installed (pip install 'helpgate[ray]'); the Ray scoring test is skipped"
)
def test_ray_scoring_matches_in_process(tmp_path):
    prm = ProcessRewardModel.create("tiny", head="value")
    torch.manual_seed(0)
    torch.nn.init.normal_(prm.head.linear.weight, std=1.0)
    model = prm.save(tmp_path / "prm")
    data = tmp_path / "data"
    data.mkdir()
    for s in range(3):
        synthetic_frame(episodes=5, seed=s).write_parquet(data / f"part-{s}.parquet")
    mark_complete(data)
    # part-0 holds "training" episodes: their saved out-of-fold scores must be written, by Ray workers too.
    trained = add_labels(synthetic_frame(episodes=5, seed=0))
    trained.select(
        "episode_id", "step", pl.lit(0).alias("fold"), (0.123 + 0.01 * pl.col("step")).alias("prm_score"),
        pl.col("prefix_key").last().over("episode_id").alias("episode_hash"),
    ).write_parquet(model / OOF_FILE)
    local = tmp_path / "local"
    run_score(ScoreConfig(data=str(data), model=str(model), out=str(local), progress=False))

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = run_score(
            ScoreConfig(data=str(data), model=str(model), out=str(tmp_path / "ray"), ray=True, progress=False)
        )
    finally:
        ray.shutdown()
    assert summary["scored"] == 3
    for s in range(3):
        a = pl.read_parquet(local / f"part-{s}.parquet")
        b = pl.read_parquet(tmp_path / "ray" / f"part-{s}.parquet")
        assert a.select("episode_id", "step").equals(b.select("episode_id", "step"))
        np.testing.assert_allclose(a["prm_score"].to_numpy(), b["prm_score"].to_numpy(), atol=1e-5)
        is_oof = np.isclose(b["prm_score"].to_numpy(), 0.123 + 0.01 * b["step"].to_numpy())
        assert is_oof.all() if s == 0 else not is_oof.any()
