"""The solver's objective: the scored success (default) or the summed logged reward."""

import itertools

import numpy as np
import polars as pl
import pytest

from helper.solve.solve_command import SolveConfig, run
from tabular_rl import Discretizer, Solution, estimate, solve_exact


def _progress_is_not_winning(copies: int = 40) -> pl.DataFrame:
    """Two decisions per episode. An intervention at step 0 makes progress (reward 1) but never wins;
    only an intervention at step 1 wins (success 1), with no progress reward. Every pair of actions
    is logged ``copies`` times, one state (constant score)."""
    rows = []
    for k, (a0, a1) in enumerate(itertools.product((False, True), repeat=2)):
        for copy in range(copies):
            episode = f"e{k}-{copy}"
            success = float(a1)
            rows.append((episode, 0, a0, 1, float(a0), False, success))
            rows.append((episode, 1, a1, 1 - int(a0), 0.0, True, success))
    frame = pl.DataFrame(rows, schema=["episode_id", "step", "intervened", "budget_left", "reward", "done",
                                       "success"], orient="row")
    return frame.with_columns(pl.lit(0.5).alias("prm_score"))


def _first_move(frame: pl.DataFrame, objective: str, shaping: float = 0.0) -> tuple[float, float]:
    """(intervene at step 0 with the budget of 1 intact?, expected success of the policy)."""
    disc = Discretizer(bins=1).fit(frame["prm_score"], frame["step"])
    model = estimate(frame, disc, backoff=0.0, objective=objective, shaping=shaping)
    solution = solve_exact(model, 1)
    return float(solution.policy[0, 0, 1]), solution.expected_success


def test_objectives_give_different_policies():
    frame = _progress_is_not_winning()
    # Summed progress: spend the one intervention at step 0 (reward 1 there), so never win.
    assert _first_move(frame, "reward") == (1.0, pytest.approx(0.0))
    # Winning: keep it for step 1, the only decision that changes the outcome.
    assert _first_move(frame, "success") == (0.0, pytest.approx(1.0))
    # Progress as a light shaping term does not overturn the win; a heavy one does.
    assert _first_move(frame, "success", shaping=0.5) == (0.0, pytest.approx(1.0))
    assert _first_move(frame, "success", shaping=2.0) == (1.0, pytest.approx(0.0))


def test_solve_command_maximises_success_by_default(tmp_path):
    data = tmp_path / "data.parquet"
    _progress_is_not_winning().write_parquet(data)
    for objective, expected in ((None, 1.0), ("reward", 0.0)):
        out = tmp_path / str(objective)
        cfg = SolveConfig(data=str(data), budgets=[1], bins=1, backoff="0", out=str(out))
        if objective:
            cfg.objective = objective
        summary = run(cfg)
        solution = Solution.load(out / "policy_c1.npz")
        assert solution.expected_success == pytest.approx(expected, abs=0.03)
        assert summary["config"]["objective"] == (objective or "success")


def test_objectives_agree_where_success_is_the_mean_reward():
    # ProductQA-like: success is the mean per-step reward, so success credit = reward / length.
    rng = np.random.default_rng(0)
    T, n = 4, 300
    rows = []
    for e in range(n):
        rewards, explore = [], rng.random() * 0.6
        for t in range(T):
            score = rng.random()
            act = bool(rng.random() < explore)
            rewards.append(1.0 if act else float(rng.random() < score))
            rows.append([f"e{e}", t, act, 0, rewards[-1], t == T - 1, 0.0, score])
        for row in rows[-T:]:
            row[6] = float(np.mean(rewards))
    frame = pl.DataFrame(rows, schema=["episode_id", "step", "intervened", "budget_left", "reward", "done",
                                       "success", "prm_score"], orient="row")
    disc = Discretizer(bins=4).fit(frame["prm_score"], frame["step"])
    for budget in (1, 2):
        policies = [solve_exact(estimate(frame, disc, objective=o), budget).policy for o in ("reward", "success")]
        assert np.array_equal(*policies)


def test_objective_errors_name_the_fix():
    frame = _progress_is_not_winning(2)
    disc = Discretizer(bins=1).fit(frame["prm_score"], frame["step"])
    with pytest.raises(ValueError, match="objective='wins'"):
        estimate(frame, disc, objective="wins")
    with pytest.raises(ValueError, match="--objective reward"):
        from tabular_rl.transitions import Columns

        estimate(frame.drop("success"), disc, columns=Columns(success=None), objective="success")
    with pytest.raises(ValueError, match="shaping"):
        estimate(frame, disc, objective="success", shaping=-1.0)
