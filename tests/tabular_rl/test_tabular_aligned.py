"""Episodes of different horizons counted from their ends: a deadline game where only help at an episode's last
step wins, so a table over steps from the start cannot tell one game's deadline from another's middle."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from helper.gates.helper_gate import HelperGate
from tabular_rl.aligned import align, aligned, longest_if_they_differ
from tabular_rl.discretize import Discretizer
from tabular_rl.estimate import TabularModel, estimate
from tabular_rl.evaluate import evaluate
from tabular_rl.solvers.exact import solve_exact
from agile.protocol import Observation

HORIZONS = (2, 4)
WIN = 0.8
"""Help at an episode's last step wins with this chance; help anywhere else, and no help, changes nothing."""
CRASH = 5
"""Every 5th episode ends a step before its horizon, so the horizon is a limit (``longest_if_they_differ``)."""


def deadline_rows(episodes: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(episodes):
        h = HORIZONS[e % 2]
        left, won = 3, False
        for t in range(h):
            helped = bool(left > 0 and rng.random() < 0.5)
            left -= helped
            won = helped and t == h - 1 and rng.random() < WIN
            crashed = e % CRASH == CRASH - 1 and t == h - 2
            rows.append({"episode_id": f"e{e}", "step": t, "intervened": helped, "reward": float(won),
                         "done": t == h - 1 or crashed, "prm_score": float(rng.random()),
                         "budget_left": left + helped, "horizon": h})
            if crashed:
                break
        rows = [r | {"success": float(won)} if r["episode_id"] == f"e{e}" else r for r in rows]
    return pl.DataFrame(rows)


def played(policy: np.ndarray, to: int | None) -> float:
    """The true success of a (step, state, budget left) table under a cap of 1 (state 0: the score is noise)."""
    total = 0.0
    for h in HORIZONS:
        left = 1
        for t in range(h):
            step = int(aligned([t], [h], to)[0])
            if left and policy[min(step, policy.shape[0] - 1), 0, left] > 0.5:
                left -= 1
                if t == h - 1:
                    total += WIN
    return total / len(HORIZONS)


def fitted(rows):
    return Discretizer(1).fit(rows["prm_score"], rows["step"])


def test_steps_count_back_from_each_episodes_end():
    rows = deadline_rows(8, 0)
    assert longest_if_they_differ(rows) == 4
    assert longest_if_they_differ(rows.filter(pl.col("horizon") == 4)) is None  # one horizon: steps kept
    assert longest_if_they_differ(rows.drop("horizon")) is None
    every = rows.filter(pl.col("episode_id") != "e4")
    assert longest_if_they_differ(every) is None  # each episode runs to its horizon: a task's length, no deadline
    moved = align(rows, 4)
    short = moved.filter(pl.col("horizon") == 2)["step"].to_list()
    assert set(short) == {2, 3} and moved.filter(pl.col("horizon") == 4)["step"].to_list()[:4] == [0, 1, 2, 3]
    assert aligned([0, 5], [None, 2], 4).tolist() == [0, 7]  # an unknown horizon counts as the longest


def test_an_episode_that_starts_later_enters_the_model_there():
    rows = align(deadline_rows(400, 1), 4)
    model = estimate(rows, fitted(rows), objective="success")
    assert model.entries is not None
    assert model.start.sum() == pytest.approx(0.5) and model.entries[2].sum() == pytest.approx(0.5)
    assert model.start.sum() + model.entries.sum() == pytest.approx(1.0)


def test_entries_are_read_by_hand():
    # One state; the episode wins when it reaches the step-1 row with help there. Half start at step 0, half at 1.
    transitions = np.zeros((2, 1, 2, 2))
    transitions[0, 0, :, 0] = 1.0  # step 0 always goes on
    transitions[1, 0, :, 1] = 1.0  # step 1 ends
    success = np.zeros((2, 1, 2))
    success[1, 0, 1] = 1.0  # help at the last step wins
    model = TabularModel(transitions=transitions, rewards=success.copy(), start=np.array([0.5]), success=success,
                         entries=np.array([[0.0], [0.5]]))
    policy = np.zeros((2, 1, 2))
    policy[1, 0, 1] = 1.0
    result = evaluate(model, policy, 1, hard_budget=True)
    assert result.expected_success == pytest.approx(1.0) and result.expected_interventions == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sum to 1"):
        TabularModel(transitions=transitions, rewards=success.copy(), start=np.array([0.5]), success=success)


def test_the_aligned_solve_helps_at_every_deadline_and_reads_its_own_success():
    rows = deadline_rows(2000, 2)
    to = longest_if_they_differ(rows)
    model = estimate(align(rows, to), fitted(rows), objective="success")
    solution = solve_exact(model, 1)
    assert played(solution.policy, to) == pytest.approx(WIN)
    assert solution.expected_success == pytest.approx(WIN * (1 - 1 / CRASH), abs=0.04)  # a crash never wins
    blind = solve_exact(estimate(rows, fitted(rows), objective="success"), 1)
    assert played(blind.policy, None) <= WIN / 2 + 1e-9  # from the start, one deadline is another game's middle


class HalfScorer:
    def score(self, observation, proposal=None):
        return 0.5


def test_the_gate_reads_the_table_at_the_aligned_step():
    rows = deadline_rows(2000, 3)
    to = longest_if_they_differ(rows)
    disc = fitted(rows)
    disc.aligned_to = to
    solution = solve_exact(estimate(align(rows, to), disc, objective="success"), 1)
    gate = HelperGate("table", scorer=HalfScorer(), table=solution, discretizer=Discretizer.from_dict(disc.to_dict()),
                      budget=1)

    def obs(step, horizon):
        return Observation("e", "deadline", "t", step, "text", horizon)

    assert gate.wants(obs(1, 2), 1) and gate.wants(obs(3, 4), 1)
    assert not gate.wants(obs(1, 4), 1) and not gate.wants(obs(0, 2), 1)
