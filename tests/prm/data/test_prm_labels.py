"""Monte-Carlo labels on a hand-made dataset, the split by episode, and single-class refusal."""

import polars as pl
import pytest

from prm.data.labels import SingleClassError, add_labels, class_counts, has_process_rewards, split_episodes
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train


def _frame(rows):
    keys = ("episode_id", "step", "state_text", "action_text", "reward", "done", "success")
    return pl.DataFrame([dict(zip(keys, r)) for r in rows])


# Episodes a, b and c share step 0 (same state and action); a and b also share step 1.
HAND = _frame(
    [
        ("a", 0, "s0", "x", 0.0, False, 1.0),
        ("a", 1, "s1", "y", 0.0, False, 1.0),
        ("a", 2, "s2", "z", 1.0, True, 1.0),
        ("b", 0, "s0", "x", 0.0, False, 0.0),
        ("b", 1, "s1", "y", 0.5, False, 0.0),
        ("b", 2, "s9", "z", -0.5, True, 0.0),
        ("c", 0, "s0", "x", 0.0, False, 0.6),
        ("c", 1, "s7", "w", 0.6, True, 0.6),
        ("d", 0, "other", "x", 0.0, True, 0.25),
    ]
)


def test_hard_soft_and_process_labels_exact():
    out = add_labels(HAND, threshold=0.5).sort(["episode_id", "step"])
    assert out["label_hard"].to_list() == [1, 1, 1, 0, 0, 0, 1, 1, 0]
    soft_step0 = (1.0 + 0.0 + 0.6) / 3  # a, b, c share the prefix of step 0
    expected_soft = [soft_step0, 0.5, 1.0, soft_step0, 0.5, 0.0, soft_step0, 0.6, 0.25]
    assert out["label_soft"].to_list() == pytest.approx(expected_soft)
    assert out["return_to_go"].to_list() == pytest.approx([1.0, 1.0, 1.0, 0.0, 0.0, -0.5, 0.6, 0.6, 0.0])
    assert out["label_process"].to_list() == pytest.approx([0, 0, 1, 0, 0.5, 0, 0, 0.6, 0])
    assert has_process_rewards(HAND)  # b's step 1 is rewarded before the end
    assert class_counts(HAND, 0.5) == (2, 2)


def test_action_changes_the_prefix():
    frame = HAND.with_columns(
        pl.when(pl.col("episode_id") == "b").then(pl.lit("other")).otherwise("action_text").alias("action_text")
    )
    out = add_labels(frame).sort(["episode_id", "step"])
    assert out["label_soft"][0] == pytest.approx((1.0 + 0.6) / 2)  # b no longer shares step 0
    before = add_labels(frame, tag_after="state").sort(["episode_id", "step"])
    assert before["label_soft"][0] == pytest.approx((1.0 + 0.0 + 0.6) / 3)  # pre-action: it does


def test_split_is_by_episode_and_stratified():
    frame = synthetic_frame(episodes=50, seed=3)
    train, val = split_episodes(frame, val_fraction=0.3, seed=7)
    assert not set(train) & set(val)
    assert set(train) | set(val) == set(frame["episode_id"].unique().to_list())
    for side in (train, val):
        rows = frame.filter(pl.col("episode_id").is_in(side))
        assert rows["success"].min() == 0.0 and rows["success"].max() == 1.0  # both classes
    assert split_episodes(frame, 0.3, seed=7) == (train, val)
    assert 12 <= len(val) <= 18


def test_refuses_single_class_naming_counts(tmp_path):
    frame = synthetic_frame(episodes=5, seed=0).with_columns(pl.lit(0.0).alias("success"))
    with pytest.raises(SingleClassError, match=r"0 successful and 5 failed episodes"):
        run_train(TrainConfig(data="hand-made", out=str(tmp_path), model="tiny"), frame=frame)
    all_won = frame.with_columns(pl.lit(0.7).alias("success"))
    with pytest.raises(SingleClassError, match=r"5 successful and 0 failed"):
        run_train(TrainConfig(data="hand-made", out=str(tmp_path), model="tiny"), frame=all_won)
