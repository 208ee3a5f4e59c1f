"""Training end to end on the tiny backbone: the PRM learns a cue word, saves and reloads exactly."""

import json

import numpy as np
import polars as pl
import pytest

from prm.data.episodes import episodes_of
from prm.verifiers.load import load_prm
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from helper_data import complete_folder


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


def test_report_is_out_of_fold_over_whole_episodes(trained):
    out, report = trained
    split = json.loads((out / "split.json").read_text())
    assert set(split["folds"]) == set(FRAME["episode_id"])  # every episode in exactly one fold
    assert sorted(set(split["folds"].values())) == list(range(5))
    # The synthetic task ids ("task-<e mod 7>") are the groups: a group never spans two folds.
    first_task = FRAME.group_by("episode_id").agg(pl.col("task_id").first())
    fold_of_task = {}
    for episode, task in first_task.iter_rows():
        assert fold_of_task.setdefault(task, split["folds"][episode]) == split["folds"][episode]
    scored = pl.read_parquet(out / "validation_scores.parquet")
    assert scored.height == FRAME.height  # every step of every episode, each scored out of fold
    assert (scored["fold"].to_numpy() == np.array([split["folds"][e] for e in scored["episode_id"]])).all()
    assert report["oof_auroc"] == pytest.approx(report["validation"]["auroc"])
    assert report["in_fold_auroc"] == pytest.approx(report["in_fold"]["auroc"])
    assert report["folds"] == {"k": 5, "by": split["by"]}


def test_held_out_split_with_one_fold(tmp_path):
    frame = synthetic_frame(episodes=40, steps=(2, 3), seed=4)
    report = run_train(TrainConfig(data="synthetic", out=str(tmp_path), model="tiny", folds=1, l2=0.01,
                                   progress=False), frame=frame)
    split = json.loads((tmp_path / "split.json").read_text())
    assert not set(split["train"]) & set(split["validation"])
    scored = pl.read_parquet(tmp_path / "validation_scores.parquet")
    assert set(scored["episode_id"]) == set(split["validation"])
    expected = frame.filter(pl.col("episode_id").is_in(split["validation"])).height
    assert scored.height == expected  # every step of every held-out episode, nothing else
    assert report["oof_auroc"] is None and report["folds"] is None
    assert not (tmp_path / "oof_scores.parquet").exists()


def test_process_target_refuses_a_base_agent_that_is_never_right(tmp_path):
    """Episodes succeed where the human answered, but every base-agent answer is wrong: the process
    label of the rows it judges has one class, so nothing could be ranked (AUROC would be nan)."""
    from prm.data.labels import SingleClassError

    frame = synthetic_frame(episodes=12, steps=(2, 3), seed=3)
    human = (pl.col("step") == 0) & (pl.int_range(pl.len()) % 2 == 0)
    frame = frame.with_columns(pl.when(human).then(pl.lit("human")).otherwise(pl.lit("base")).alias("actor"),
                               pl.when(human).then(1.0).otherwise(0.0).alias("reward"))
    with pytest.raises(SingleClassError, match=r"all wrong \(0 of \d+ base rows\).*agile sft"):
        run_train(TrainConfig(data="synthetic", out=str(tmp_path), model="tiny", target="process", base_only=True,
                              folds=3, progress=False), frame=frame)


def test_saved_folder_scores_as_the_model_did_before_saving(tmp_path):
    """The round trip against the model in memory: its head and its calibrator, as they were, come back."""
    import torch

    from prm.verifiers.calibration import fit_calibrator
    from prm.verifiers.model import ProcessRewardModel

    prm = ProcessRewardModel.create("tiny", head="value", seed=3)
    with torch.no_grad():  # a head far from the weights a fresh one starts with, as a trained head is
        generator = torch.Generator().manual_seed(3)
        for weight in prm.head.parameters():
            weight.add_(torch.randn(weight.shape, generator=generator))
    _, episodes = episodes_of(FRAME.head(40))
    raw = np.concatenate(prm.score_episodes(episodes))
    outcomes = np.random.default_rng(3).uniform(size=raw.size) < raw
    prm.calibrator = fit_calibrator(raw, outcomes, "platt")
    before = prm.score_episodes(episodes)
    assert not np.allclose(np.concatenate(before), raw, atol=1e-3)  # the calibrator moves the scores
    assert np.ptp(raw) > 1e-3  # and the scores differ across steps: a head that was dropped would show
    prm.save(tmp_path / "prm")
    after = load_prm(tmp_path / "prm").score_episodes(episodes)
    assert len(after) == len(before)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_lora_tag_head_loss_decreases_and_round_trips(tmp_path):
    frame = synthetic_frame(episodes=40, steps=(2, 3), seed=2)
    cfg = TrainConfig(
        data="synthetic",
        out=str(tmp_path),
        model="tiny",
        head="tag",
        lora=True,
        folds=1,  # held out: the saved model's own scores are the report's (out of fold: test_prm_verifiers)
        epochs=4,
        lr=3e-3,
        head_lr=1e-2,
        batch_tokens=1024,
        step_tokens=1024,
        progress=False,
    )
    report = run_train(cfg, frame=frame)
    losses = report["losses"]
    assert len(losses) >= 8
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    _, episodes = episodes_of(frame)
    trained = load_prm(tmp_path)
    assert trained.settings.lora and trained.settings.head == "tag"
    scores = np.concatenate(trained.score_episodes(episodes))
    reference = pl.read_parquet(tmp_path / "validation_scores.parquet").sort(["episode_id", "step"])
    _ids, val_episodes = episodes_of(
        frame.filter(pl.col("episode_id").is_in(reference["episode_id"].unique().to_list()))
    )
    # The saved PRM maps its scores through the calibrator fitted on these held-out scores.
    expected = trained.calibrator(reference["prm_score"].to_numpy())
    np.testing.assert_allclose(np.concatenate(trained.score_episodes(val_episodes)), expected, atol=1e-5)
    assert np.isfinite(scores).all()


def _score_folder(tmp_path, frame, model):
    from prm.scoring.score import ScoreConfig, run_score

    data = complete_folder(frame, tmp_path / "data")
    summary = run_score(ScoreConfig(data=str(data), model=str(model), progress=False))
    return summary, pl.read_parquet(data / "part-000.parquet").sort(["episode_id", "step"])


def _twenty_with_one_edited(frame: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """The first 20 episodes of ``frame``, the first one's state text edited (new to a trained PRM), and its id."""
    frame = frame.filter(pl.col("episode_id").is_in(frame["episode_id"].unique(maintain_order=True)[:20].to_list()))
    changed = frame["episode_id"][0]
    edited = pl.when(pl.col("episode_id") == changed).then(pl.col("state_text") + " edited")
    return frame.with_columns(edited.otherwise(pl.col("state_text"))), changed


def test_score_gives_training_episodes_their_out_of_fold_scores(trained, tmp_path):
    out, _ = trained
    # One episode's text changed after training: it is new data, scored by the saved all-data model.
    frame, changed = _twenty_with_one_edited(FRAME)
    summary, got = _score_folder(tmp_path, frame, out)
    ids, episodes = episodes_of(frame)
    reference = load_prm(out)
    expected_changed = reference.score_episodes([episodes[ids.index(changed)]])[0]
    assert summary["tokens"] == reference.last_run["tokens"] > 0  # the backbone saw only the changed one
    np.testing.assert_allclose(got.filter(pl.col("episode_id") == changed)["prm_score"], expected_changed, atol=1e-5)
    oof = pl.read_parquet(out / "oof_scores.parquet").sort(["episode_id", "step"])
    kept = got.filter(pl.col("episode_id") != changed).join(oof, on=["episode_id", "step"], suffix="_oof")
    assert kept.height == frame.height - len(expected_changed)
    np.testing.assert_array_equal(kept["prm_score"], kept["prm_score_oof"])
    # ...and they are not the all-data model's (in-fold) scores.
    in_fold = np.concatenate(reference.score_episodes([episodes[i] for i, e in enumerate(ids) if e != changed]))
    assert np.abs(kept["prm_score"].to_numpy() - in_fold).max() > 1e-3


def test_score_reuses_saved_features_with_identical_scores(tmp_path):
    from prm.data.episodes import FEATURES_FILE

    frame = synthetic_frame(episodes=40, steps=(2, 3), seed=4)
    model = tmp_path / "prm"
    run_train(TrainConfig(data="synthetic", out=str(model), model="tiny", folds=1, l2=0.01, progress=False),
              frame=frame)
    assert (model / FEATURES_FILE).exists()
    frame, changed = _twenty_with_one_edited(frame)
    summary, got = _score_folder(tmp_path, frame, model)
    ids, episodes = episodes_of(frame)
    reference = load_prm(model)
    reference.score_episodes([episodes[ids.index(changed)]])
    assert summary["tokens"] == reference.last_run["tokens"] > 0  # the backbone saw only the changed one
    np.testing.assert_allclose(got["prm_score"].to_numpy(), np.concatenate(reference.score_episodes(episodes)),
                               atol=1e-5)
