"""Pessimism: no intervention where its own gain is within z standard errors of nothing."""

import itertools

import numpy as np
import pytest

from tabular_rl import TabularModel, solve_exact
from tabular_rl.evaluate import evaluate
from tabular_rl.solvers import solve
from tabular_rl.solvers.pessimism import effective_rows, gain_standard_error

MIXED, RISKY = 0, 1


def mixed_and_risky_model(rows_intervene: int = 30, rows_base: int = 70) -> TabularModel:
    """Two steps, two states equally likely at each. State 0 ("mixed": a few risky steps among calm
    ones) ends the episode 2% of the time under the agent; state 1 ("risky") half the time. An
    intervention makes the step safe; success is credited at the last step."""
    T, S = 2, 2
    transitions = np.zeros((T, S, 2, S + 1))
    transitions[0, :, :, :S] = 0.5
    transitions[0, MIXED, 0] = [0.49, 0.49, 0.02]
    transitions[0, RISKY, 0] = [0.25, 0.25, 0.5]
    transitions[1, :, :, S] = 1.0
    rewards = np.zeros((T, S, 2))
    rewards[1] = [[0.98, 1.0], [0.5, 1.0]]
    counts = np.zeros((T, S, 2), dtype=np.int64)
    counts[..., 0], counts[..., 1] = rows_base, rows_intervene
    return TabularModel(transitions=transitions, rewards=rewards, start=np.array([0.5, 0.5]),
                        success=rewards.copy(), counts=counts)


def test_the_standard_error_counts_the_borrowed_rows():
    model = mixed_and_risky_model()
    model.counts[1, MIXED, 1] = 0  # an unseen cell counts what it borrows, at least one row
    model.transition_backoff = 5.0  # each per-step estimate borrows up to 5 rows pooled over steps
    rows = effective_rows(model)
    assert rows[0, RISKY, 0] == 70 + 5 and rows[0, MIXED, 1] == 30 + 0  # step 1 has none of it to lend
    assert rows[1, MIXED, 1] == 0 + 5  # borrows 5 of step 0's 30
    se = gain_standard_error(model)
    assert se[0, MIXED] == pytest.approx(0.5 * np.sqrt(1 / 75 + 1 / 30))
    assert se[1, MIXED] == pytest.approx(0.5 * np.sqrt(1 / 75 + 1 / 5))
    model.transition_backoff = 0.0
    model.counts[1, MIXED, 1] = 0
    assert effective_rows(model)[1, MIXED, 1] == 1.0
    with pytest.raises(ValueError, match="pessimism=-1"):
        solve_exact(model, 1, pessimism=-1.0)


@pytest.mark.parametrize("budget", [1, 2])
def test_a_thin_small_gain_is_not_taken_and_a_large_one_is(budget):
    model = mixed_and_risky_model()
    point, pessimist = solve_exact(model, budget), solve(model, budget, pessimism=1.0)
    if budget == 2:  # with budget to spare the point estimate spends on the mixed state's 2% gain
        assert point.policy[:, MIXED, 1:].any()
    # One standard error of the gain: 0.5 * sqrt(1/30 + 1/70) = 0.109 > the mixed state's 0.02.
    assert not pessimist.policy[:, MIXED].any()
    assert pessimist.policy[:, RISKY, 1:].all()
    evaluated = evaluate(model, pessimist.policy, budget, hard_budget=True)
    assert pessimist.expected_success == pytest.approx(evaluated.expected_success)
    assert pessimist.expected_interventions <= point.expected_interventions
    # With a hundred times the rows the same 2% gain is clear of one standard error (budget 2).
    assert solve(mixed_and_risky_model(3000, 7000), 2, pessimism=1.0).policy[:, MIXED, 1:].any()


def test_it_is_the_best_policy_that_leaves_the_insignificant_cells_to_the_agent():
    model, budget = mixed_and_risky_model(), 2
    found = solve(model, budget, pessimism=1.0)
    T, S = model.horizon, model.n_states
    best = -np.inf
    for bits in itertools.product((0.0, 1.0), repeat=T * budget):  # every policy that never intervenes when mixed
        policy = np.zeros((T, S, budget + 1))
        policy[:, RISKY, 1:] = np.reshape(bits, (T, budget))
        best = max(best, evaluate(model, policy, budget, hard_budget=True).expected_return)
    assert found.expected_return == pytest.approx(best)


@pytest.mark.parametrize("seed", range(8))
def test_pessimism_zero_is_the_point_solve_and_without_bound_the_agent_acts_alone(seed):
    # Random models: at z = 0 the own-gain test removes nothing the point solve takes (more budget
    # never lowers a value, so Q_intervene(b) > Q_base(b) implies > Q_base(b - 1)).
    rng = np.random.default_rng(seed)
    T, S = 4, 3
    model = TabularModel(transitions=rng.dirichlet(np.ones(S + 1), size=(T, S, 2)), rewards=rng.random((T, S, 2)),
                         start=rng.dirichlet(np.ones(S)), counts=rng.integers(1, 40, size=(T, S, 2)))
    for budget in (1, 2, 3):
        point = solve_exact(model, budget)
        assert np.array_equal(solve(model, budget, pessimism=0.0).policy, point.policy)
        assert point.policy.any()  # the test bites
        assert not solve(model, budget, pessimism=1e9).policy.any()  # no gain is clear of a billion errors


def test_only_the_exact_solver_takes_pessimism():
    with pytest.raises(ValueError, match="method exact"):
        solve(mixed_and_risky_model(), 1, method="lagrangian", pessimism=1.0)
