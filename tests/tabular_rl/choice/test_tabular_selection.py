"""The helper's family and its choice on training folds: replay, members, the judge's grid, cross-fitting."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helper.gates.simple import ScoreThresholdGate
from agile.protocol import Observation
from tabular_rl.choice.judge import grid_of, grid_policy
from tabular_rl.choice.members import MemberSpec, default_family, fit_member, threshold_member
from tabular_rl.choice.replay import ReplayEpisodes, replay, replayable
from tabular_rl.choice.selection import CrossFitted, cross_fitted


def question_rows(seed: int, episodes: int = 60, horizon: int = 5, noise: float = 0.1) -> pl.DataFrame:
    """ProductQA-like rows decided after the proposal: separate questions, each proposal right with probability
    ``p``, the score ``p`` plus noise, the proposal's outcome logged at every row, random interventions."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(episodes):
        explore, left, kept = rng.choice([0.0, 0.3, 0.6]), 3, []
        for t in range(horizon):
            p = rng.beta(2.0, 1.2)
            right = float(rng.random() < p)
            helped = bool(left > 0 and rng.random() < explore)
            left -= helped
            kept.append({"episode_id": f"e{e}", "step": t, "intervened": helped, "budget_left": left + helped,
                         "reward": 1.0 if helped else right, "done": t == horizon - 1, "proposal_reward": right,
                         "prm_score": float(np.clip(p + rng.normal(0, noise), 0, 1)), "task_id": f"g{e % 10}/q{t}"})
        success = float(np.mean([r["reward"] for r in kept]))
        rows += [r | {"success": success} for r in kept]
    return pl.DataFrame(rows)


def brute_replay(rows: pl.DataFrame, decide, budget: int) -> np.ndarray:
    """Episode by episode, decision by decision, in Python."""
    helped = rows.filter(pl.col("intervened"))["reward"].mean()
    out = []
    for _, episode in sorted(rows.group_by("episode_id"), key=lambda kv: kv[0][0]):
        episode = episode.sort("step")
        left, total = budget, 0.0
        for r in episode.iter_rows(named=True):
            ask = left > 0 and bool(decide(np.array([r["step"]]), np.array([r["prm_score"]]), np.array([left]))[0])
            left -= ask
            total += helped if ask else r["proposal_reward"]
        out.append(total / episode.height)
    return np.array(out)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 1000), budget=st.integers(0, 4), share=st.floats(0.05, 0.95))
def test_replay_equals_playing_each_episode_in_turn(seed, budget, share):
    rows = question_rows(seed, episodes=12)
    member = threshold_member(MemberSpec("threshold", share=share), rows["prm_score"].to_numpy(), 5, 4)
    outcome = replay(ReplayEpisodes.from_rows(rows), member.decide, budget)
    assert np.allclose(outcome.success, brute_replay(rows, member.decide, budget))
    assert (outcome.interventions <= budget).all()


def test_rows_replay_only_where_decisions_are_separate_questions():
    rows = question_rows(0, episodes=8)
    assert replayable(rows)
    assert not replayable(rows.drop("proposal_reward"))
    assert not replayable(rows.with_columns(pl.lit(1.0).alias("success")))  # success not the mean reward


@settings(max_examples=60, deadline=None)
@given(scores=st.lists(st.one_of(st.floats(0, 1), st.just(float("nan"))), min_size=1, max_size=40),
       share=st.floats(0.01, 1.0), left=st.integers(0, 3))
def test_a_threshold_member_decides_as_the_threshold_gate(scores, share, left):
    training = np.array([s for s in scores if s == s] or [0.5])
    member = threshold_member(MemberSpec("threshold", share=share), training, horizon=4, budget=3)
    gate = ScoreThresholdGate(lambda observation: observation.features["s"], member.level, budget=3)
    for k, score in enumerate(scores):
        observation = Observation(f"e{k}", "toy", "t", 0, "", 4, features={"s": score})
        expected = left > 0 and gate.wants(observation, left)
        assert bool(member.decide([0], [score], [left])[0]) == expected


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 1000), bins=st.integers(1, 8), share=st.floats(0.05, 0.9))
def test_the_judges_grid_keeps_every_members_decision(seed, bins, share):
    # A grid holding every member's edges: each of its states lies inside one bin of each member, so the grid's
    # table decides as the member does at every logged score.
    rows = question_rows(seed, episodes=20)
    members = [fit_member(MemberSpec("table", bins), rows, 3), fit_member(MemberSpec("threshold", share=share), rows, 3)]
    grid = grid_of([m.edges for m in members])
    step, score = rows["step"].to_numpy(), rows["prm_score"].to_numpy()
    states = grid.transform(score)
    for member in members:
        table = grid_policy(member.decide, grid, 5, 3)
        for left in range(4):
            expected = member.decide(step, score, np.full(step.size, left))
            assert np.array_equal(table[step, states, left] > 0.5, expected)


def test_cross_fitting_reads_each_member_on_folds_it_was_not_fitted_on():
    rows = question_rows(3, episodes=40)
    folds = np.array([int(t.split("/")[0][1:]) % 2 for t in rows["task_id"]])
    spec = MemberSpec("threshold", share=0.3)
    table = cross_fitted(rows, folds, [spec], [1, 2], evaluator="replay")
    # By hand: the level from one fold's scores, replayed on the other fold; the mean over every episode.
    total, n = np.zeros(2), 0
    for k in (0, 1):
        fit, held = rows.filter(pl.Series(folds != k)), rows.filter(pl.Series(folds == k))
        member = threshold_member(spec, fit["prm_score"].to_numpy(), 5, 2)
        episodes = held["episode_id"].n_unique()
        total += [brute_replay(held, member.decide, c).mean() * episodes for c in (1, 2)]
        n += episodes
    assert np.allclose(table.success[0], total / n) and table.episodes == n == 40


def test_the_replay_and_the_judge_agree_where_decisions_are_separate():
    rows = question_rows(5, episodes=200)
    folds = np.array([int(t.split("/")[0][1:]) % 5 for t in rows["task_id"]])
    family = default_family(4, "quantile", rows.height, 5, 5.0, 2, levels=8)
    replayed = cross_fitted(rows, folds, family, [1, 2], evaluator="replay")
    judged = cross_fitted(rows, folds, family, [1, 2], evaluator="judge")
    assert np.abs(replayed.success - judged.success).max() < 0.02
    assert np.abs(replayed.interventions - judged.interventions).max() < 0.1


def test_the_choice_breaks_ties_toward_the_first_member_and_can_hold_a_spend():
    specs = [MemberSpec("table", 6), MemberSpec("threshold", share=0.2), MemberSpec("threshold", share=0.4)]
    table = CrossFitted(specs, [1], np.array([[0.5], [0.5], [0.7]]), np.array([[1.0], [0.8], [1.4]]), "replay", 5)
    assert table.best() == {1: 2}
    assert table.best(table.kind_indices("threshold")) == {1: 2}
    assert table.best([0, 1]) == {1: 0}  # a tie: the configured solve, listed first
    assert table.best_within(1.0, 1) == 0  # 1.4 an episode is over the spend; the first of the tied others
    assert table.best_within(0.5, 1) == 1  # none within: the one that spends least


def test_the_smooth_member_is_played_within_one_standard_error_of_the_best_never_below_a_threshold():
    specs = [MemberSpec("table", 6), MemberSpec("table", 12, dynamics="smooth"), MemberSpec("threshold", share=0.2)]
    # Per fold (3), member and cap (4): the first member leads the smooth one by 0.02 on average at every cap.
    lead = np.array([[0.01, 0.03, 0.02], [0.02, 0.02, 0.02], [-0.02, 0.06, 0.02], [-0.02, 0.06, 0.02]]).T
    smooth = np.full((3, 4), 0.60)
    threshold = np.array([0.55, 0.55, 0.61, 0.55])
    folds = np.stack([smooth + lead, smooth, np.broadcast_to(threshold, (3, 4))], axis=1)
    table = CrossFitted(specs, [1, 2, 3, 4], folds.mean(0), np.ones((3, 4)), "judge", 3, 30, fold_success=folds)
    # Standard errors of the paired differences: 0.0058, 0 (the same lead on every fold), 0.0231, 0.0231.
    assert table.best() == {1: 0, 2: 0, 3: 0, 4: 0}
    # C = 1: 0.02 > 0.0058, the best; C = 2: a steady lead, the best; C = 3: within, but below the threshold's 0.61;
    # C = 4: within and above the threshold, the smooth member.
    assert table.chosen() == {1: 0, 2: 0, 3: 0, 4: 1}
    one_fold = CrossFitted(specs, [1, 2, 3, 4], folds.mean(0), np.ones((3, 4)), "judge", 1, 30, fold_success=folds[:1])
    assert one_fold.chosen() == one_fold.best()  # no spread to read: the best


def test_the_family_grows_finer_bins_only_where_rows_allow():
    few = default_family(6, "quantile", rows=100, horizon=5, decisions=5, top_budget=2)
    many = default_family(6, "quantile", rows=10_000, horizon=5, decisions=5, top_budget=2)
    assert [s.name for s in few if s.kind == "table"] == ["table:6q", "table:6q,pooled", "table:6q,stationary",
                                                          "table:12q,smooth", "table:6q,z1"]
    assert "table:12q" in [s.name for s in many]
    shares = [s.share for s in many if s.kind == "threshold"]
    assert len(shares) == 32 and shares[-1] == pytest.approx(1.0) and shares == sorted(shares)
