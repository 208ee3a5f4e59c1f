"""Training end to end on the tiny backbone: the PRM learns a cue word, saves and reloads exactly."""

import json

import numpy as np
import polars as pl
import pytest

from prm.model import ProcessRewardModel
from prm.shards import episodes_of
from prm.synthetic import synthetic_frame
from prm.train import TrainConfig, run_train


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


FRAME = synthetic_frame(episodes=120, steps=(2, 4), words_per_state=4, seed=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("prm-value")
    report = run_train(
        TrainConfig(data="synthetic", out=str(out), model="tiny", head="value", progress=False), frame=FRAME
    )
    return out, report


def test_frozen_value_head_learns_the_cue(trained):
    out, report = trained
    assert report["validation"]["auroc"] > 0.8
    assert report["validation"]["brier"] < 0.2
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["validation"]["auroc"] == pytest.approx(report["validation"]["auroc"])
    assert {"auroc", "brier", "ece"} <= set(metrics["validation"])
    assert (out / "reliability.png").read_bytes()[:4] == b"\x89PNG"


def test_validation_rows_are_whole_held_out_episodes(trained):
    out, _ = trained
    split = json.loads((out / "split.json").read_text())
    assert not set(split["train"]) & set(split["validation"])
    scored = pl.read_parquet(out / "validation_scores.parquet")
    assert set(scored["episode_id"]) == set(split["validation"])
    expected = FRAME.filter(pl.col("episode_id").is_in(split["validation"])).height
    assert scored.height == expected  # every step of every held-out episode, nothing else


def test_save_load_round_trip_gives_identical_scores(trained):
    out, _ = trained
    _, episodes = episodes_of(FRAME.head(40))
    first = ProcessRewardModel.load(out).score_episodes(episodes)
    again = ProcessRewardModel.load(out).score_episodes(episodes)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    validation = pl.read_parquet(out / "validation_scores.parquet")
    _ids, val_episodes = episodes_of(
        FRAME.filter(pl.col("episode_id").is_in(validation["episode_id"].unique().to_list()))
    )
    rescored = np.concatenate(ProcessRewardModel.load(out).score_episodes(val_episodes))
    np.testing.assert_allclose(rescored, validation.sort(["episode_id", "step"])["prm_score"].to_numpy(), atol=1e-5)


def test_lora_tag_head_loss_decreases_and_round_trips(tmp_path):
    frame = synthetic_frame(episodes=40, steps=(2, 3), seed=2)
    cfg = TrainConfig(
        data="synthetic",
        out=str(tmp_path),
        model="tiny",
        head="tag",
        lora=True,
        epochs=4,
        lr=3e-3,
        head_lr=1e-2,
        batch_tokens=1024,
        progress=False,
    )
    report = run_train(cfg, frame=frame)
    losses = report["losses"]
    assert len(losses) >= 8
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    _, episodes = episodes_of(frame)
    trained = ProcessRewardModel.load(tmp_path)
    assert trained.settings.lora and trained.settings.head == "tag"
    scores = np.concatenate(trained.score_episodes(episodes))
    reference = pl.read_parquet(tmp_path / "validation_scores.parquet").sort(["episode_id", "step"])
    _ids, val_episodes = episodes_of(
        frame.filter(pl.col("episode_id").is_in(reference["episode_id"].unique().to_list()))
    )
    np.testing.assert_allclose(np.concatenate(trained.score_episodes(val_episodes)), reference["prm_score"], atol=1e-5)
    assert np.isfinite(scores).all()


def test_score_reuses_saved_features_with_identical_scores(trained, tmp_path):
    from prm.score import ScoreConfig, run_score
    from prm.shards import FEATURES_FILE

    out, _ = trained
    assert (out / FEATURES_FILE).exists()
    frame = FRAME.filter(pl.col("episode_id").is_in(FRAME["episode_id"].unique(maintain_order=True)[:20].to_list()))
    # One episode's text changed after training: it must be scored by the backbone, not the cache.
    changed = frame["episode_id"][0]
    frame = frame.with_columns(
        pl.when(pl.col("episode_id") == changed).then(pl.col("state_text") + " edited").otherwise(pl.col("state_text"))
    )
    data = tmp_path / "data"
    data.mkdir()
    frame.write_parquet(data / "part-000.parquet")
    summary = run_score(ScoreConfig(data=str(data), model=str(out), progress=False))
    ids, episodes = episodes_of(frame)
    reference = ProcessRewardModel.load(out)
    reference.score_episodes([episodes[ids.index(changed)]])
    assert summary["tokens"] == reference.last_run["tokens"] > 0  # the backbone saw only the changed one
    got = pl.read_parquet(data / "part-000.parquet").sort(["episode_id", "step"])["prm_score"].to_numpy()
    expected = np.concatenate(reference.score_episodes(episodes))
    np.testing.assert_allclose(got, expected, atol=1e-5)
