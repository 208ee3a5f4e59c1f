"""Ties go to the agent: no solver takes an intervention whose gain is exactly 0."""

import numpy as np
import polars as pl
import pytest

from tabular_rl import TabularModel, label, solve_exact, solve_lagrangian, solve_lp
from tabular_rl.evaluate import q_values
from tabular_rl.solvers import solve_priced, solve_spending


def nil_and_real_gain_model() -> TabularModel:
    """Two steps, two states. State 0 ("calm"): the agent is as good as the intervention (gain 0).
    State 1 ("risky"): the agent succeeds half the time, the intervention always (gain 1/2).
    Both start states are equally likely and the next state is drawn the same way."""
    T, S = 2, 2
    transitions = np.zeros((T, S, 2, S + 1))
    transitions[0, :, :, :S] = 0.5
    transitions[0, 1, 0] = [0.25, 0.25, 0.5]  # the risky state ends the episode half the time under base
    transitions[1, :, :, S] = 1.0
    rewards = np.zeros((T, S, 2))
    rewards[1] = [[1.0, 1.0], [0.5, 1.0]]  # success is credited at the last step
    return TabularModel(transitions=transitions, rewards=rewards, start=np.array([0.5, 0.5]), success=rewards.copy())


@pytest.mark.parametrize("budget", [1, 2, 3])
def test_no_solver_intervenes_where_the_gain_is_zero(budget):
    model = nil_and_real_gain_model()
    exact = solve_exact(model, budget)
    # The calm state's gain is never positive, and exactly 0 (equal floats) where the budget is spare.
    v_next = np.zeros((2, budget + 1))
    for t in (1, 0):
        q0, q1 = q_values(model, t, v_next, hard_budget=True)
        assert (q1[0, 1:] <= q0[0, 1:]).all() and (q1[1, 1:] > q0[1, 1:]).all()
        if t == 1 or budget >= 2:  # a spare intervention keeps its value: the gain is exactly 0
            assert q1[0, -1] == q0[0, -1]
        v_next = exact.values[t]
    assert not exact.policy[:, 0].any()  # calm: never
    assert exact.policy[:, 1, 1:].all()  # risky: always while budget is left (the test bites)
    # Risky at step 0 (1/2), then risky at step 1 (1/2): with C = 1 the second is covered only when
    # the first was calm.
    assert exact.expected_interventions == (1.0 if budget >= 2 else 0.75)
    assert exact.expected_success == (1.0 if budget >= 2 else 0.875)
    # Budget in expectation, priced with no budget, and priced down to a target spend: the calm state
    # gets no intervention, with or without budget to spare.
    for solution in (solve_lagrangian(model, budget), solve_lp(model, budget), solve_priced(model, 0.0),
                     solve_spending(model, budget, target=10.0)):
        assert np.all(solution.policy[:, 0] == 0.0), solution.method
        assert solution.expected_interventions <= max(budget, 1.0) + 1e-9, solution.method
    unpriced = solve_priced(model, 0.0)
    assert (unpriced.expected_success, unpriced.expected_interventions) == (1.0, 1.0)


def test_labels_of_calm_rows_are_base():
    model = nil_and_real_gain_model()
    rows = pl.DataFrame({"step": [0, 0, 1, 1, 1], "budget_left": [2, 2, 1, 1, 0]})
    states = np.array([0, 1, 0, 1, 1])
    labelled = label(rows, solve_exact(model, 2), states=states)
    assert labelled["optimal_intervene"].to_list() == [False, True, False, True, False]


@pytest.mark.parametrize("seed", range(12))
def test_the_lp_keeps_its_optimum_with_no_intervention_where_both_actions_are_the_same(seed):
    # Cells where intervening has the same reward and the same next states as the agent: a nil gain.
    # The first LP alone put occupancy on them for 6 of these 12 seeds.
    rng = np.random.default_rng(seed)
    T, S = 3, 3
    transitions, rewards = rng.dirichlet(np.ones(S + 1), size=(T, S, 2)), rng.random((T, S, 2))
    same = rng.random((T, S)) < 0.4
    transitions[:, :, 1][same] = transitions[:, :, 0][same]
    rewards[:, :, 1][same] = rewards[:, :, 0][same]
    model = TabularModel(transitions=transitions, rewards=rewards, start=rng.dirichlet(np.ones(S)))
    for budget in (1, 2, 3):
        lp = solve_lp(model, budget)
        assert np.all(lp.policy[..., 0][same] == 0.0)
        assert lp.expected_return == pytest.approx(solve_lagrangian(model, budget).expected_return, abs=1e-8)
        assert lp.expected_interventions <= budget + 1e-8
