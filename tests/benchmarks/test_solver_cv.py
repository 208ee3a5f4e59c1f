"""benchmarks/setups/solver_cv.py: the replay's values by hand, and what any replay must satisfy."""

import numpy as np
import polars as pl
import pytest
from imports import benchmark_module

from helper.gates.simple import FirstKGate, ScoreThresholdGate


def _rows(episodes: int = 60, steps: int = 4, seed: int = 0) -> pl.DataFrame:
    """Logged proposal-mode rows where the score tells wrong proposals (score < 0.5) from right ones."""
    rng = np.random.default_rng(seed)
    score = rng.uniform(0, 1, episodes * steps)
    kept = (score > 0.5).astype(float)
    intervened = rng.uniform(0, 1, episodes * steps) < 0.3
    reward = np.where(intervened, 1.0, kept)
    episode = np.repeat([f"e{i:03d}" for i in range(episodes)], steps)
    step = np.tile(np.arange(steps), episodes)
    success = np.repeat(reward.reshape(episodes, steps).mean(1), steps)
    return pl.DataFrame({"episode_id": episode, "step": step, "intervened": intervened, "reward": reward,
                         "proposal_reward": kept, "prm_score": score, "done": step == steps - 1,
                         "budget_left": np.full(episodes * steps, 4), "success": success})


def test_replay_of_one_episode_by_hand():
    cv = benchmark_module("solver_cv")
    frame = pl.DataFrame({"episode_id": ["a"] * 4, "step": [0, 1, 2, 3], "prm_score": [0.9, 0.1, 0.2, 0.8],
                          "proposal_reward": [1.0, 0.0, 0.0, 1.0]})
    episode = cv.Episode(frame, intervention_reward=1.0)
    low = lambda budget: ScoreThresholdGate(cv.logged_score, 0.49, budget)  # noqa: E731
    assert episode.play(low(1), 1) == (0.75, 1)  # helps at step 1, the budget is gone at step 2
    assert episode.play(low(2), 2) == (1.0, 2)
    assert episode.play(FirstKGate(1), 1) == (0.5, 1)  # first_k spends it on a right proposal
    assert episode.play(low(2), 1) == (0.75, 1)  # the replay's own count caps a gate holding more
    assert episode.random(1) == (pytest.approx(0.5 + 0.25 * 0.5), 1)  # one of four: +1/4 where wrong
    assert episode.oracle(1) == (0.75, 1) and episode.oracle(3) == (1.0, 2)  # never on a right proposal
    assert episode.score_ceiling(1) == (0.75, 1)  # the lowest score (0.1) is a wrong proposal
    assert episode.score_ceiling(3) == (1.0, 3)  # the third (0.8) is spent on a right proposal
    misranked = cv.Episode(frame.with_columns(pl.Series("prm_score", [0.05, 0.1, 0.2, 0.8])), 1.0)
    assert misranked.score_ceiling(1) == (0.5, 1)  # its lowest score is a right proposal: no gain


def test_every_replayed_gate_is_a_method_of_the_sweep_registry():
    """The replay names its rows as the sweep's methods; only the hindsight ceiling is its own."""
    from helper.evaluation.methods import METHODS

    cv = benchmark_module("solver_cv")
    assert set(cv.METHODS) - set(METHODS) == {"score_ceiling"}


def test_oracle_bounds_every_method_and_the_helper_uses_the_score():
    cv = benchmark_module("solver_cv")
    records = pl.DataFrame(cv.run_folds(_rows(), bins=6, budgets=[1, 2], folds=4, seed=0))
    assert set(records["method"]) == set(cv.METHODS)
    wide = records.pivot(on="method", index=["episode", "budget"], values="success")
    for method in cv.METHODS:
        assert (wide["oracle"] >= wide[method] - 1e-12).all(), method
    assert (records["interventions"] <= records["budget"]).all()
    mean = records.group_by(["method", "budget"]).agg(pl.col("success").mean(), pl.col("interventions").mean())
    at = {(m, b): (s, u) for m, b, s, u in mean.iter_rows()}
    for budget in (1, 2):
        # The score separates wrong proposals, so the solved helper beats a uniform choice by far,
        helper, random = at[("helper", budget)][0], at[("random", budget)][0]
        assert helper > random + 0.05
        # and priced down to the threshold's spend it spends less than the budget, not more.
        assert at[("helper_priced", budget)][1] <= at[("helper", budget)][1]


def test_report_pairs_the_helper_with_each_method(tmp_path):
    cv = benchmark_module("solver_cv")
    run = tmp_path / "run"
    (run / "solve").mkdir(parents=True)
    _rows(episodes=20).write_parquet(run / "solve" / "labels.parquet")
    text = cv.main([str(run), "--budgets", "1", "--folds", "2"])
    assert "20 episodes" in text and text.count("Δ") == len(cv.METHODS)  # one per rival plus the legend
    bad = tmp_path / "bad"
    (bad / "solve").mkdir(parents=True)
    _rows(episodes=4).drop("proposal_reward").write_parquet(bad / "solve" / "labels.parquet")
    with pytest.raises(SystemExit, match="proposal_reward"):
        cv.main([str(bad)])


def test_transfer_replays_on_other_rows_and_shows_the_score_shift(tmp_path):
    """Fitted on a run's rows, replayed on other scored shards: a shifted score moves the helper's bins."""
    from trajectories.shards import mark_complete
    from trajectories.shards import write_shard

    cv = benchmark_module("solver_cv")
    run = tmp_path / "run"
    (run / "solve").mkdir(parents=True)
    _rows(episodes=40).write_parquet(run / "solve" / "labels.parquet")
    other = _rows(episodes=12, seed=1)
    # Every score of the other episodes lies below the training median: they fill the lowest bins.
    other = other.with_columns(pl.col("prm_score") * 0.4)
    shards = tmp_path / "other"
    shards.mkdir()
    full = other.with_columns(pl.lit("test").alias("env"), pl.col("episode_id").alias("task_id"),
                              pl.lit("s").alias("state_text"), pl.lit("a").alias("action_text"),
                              pl.lit("base").alias("actor"), pl.lit(0.0).alias("explore_p"), pl.lit(0).alias("seed"),
                              pl.lit("a").alias("proposal_text"), pl.col("proposal_reward"))
    write_shard(full, shards / "shard-00000.parquet")
    mark_complete(shards)
    text = cv.main([str(run), "--transfer", str(shards), "--budgets", "1"])
    assert "12 episodes" in text and "| transfer | 48 |" in text
    transfer_row = next(line for line in text.splitlines() if line.startswith("| transfer |"))
    shares = [float(v) for v in transfer_row.rstrip(" |").split("|")[-1].split()]
    assert sum(shares[:3]) == pytest.approx(1.0, abs=0.02)  # below the training median: the lower half of the bins
    with pytest.raises(SystemExit, match="one folder per run folder"):
        cv.main([str(run), str(run), "--transfer", str(shards)])


def test_transfer_script_refuses_a_setup_without_finished_runs(tmp_path):
    transfer = benchmark_module("transfer")
    (tmp_path / "seed0").mkdir()
    with pytest.raises(SystemExit, match="not a finished pipeline run"):
        transfer.main([str(tmp_path), "--seeds", "0"])
