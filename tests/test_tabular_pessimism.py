"""Pessimism: an intervention priced at z standard errors of its gain; a thin small gain is not taken."""

import itertools

import numpy as np
import pytest

from tabular_rl import TabularModel, solve_exact
from tabular_rl.evaluate import evaluate
from tabular_rl.pessimism import effective_rows, pessimistic
from tabular_rl.solve import solve


def mixed_and_risky_model(rows_intervene: int = 30, rows_base: int = 70) -> TabularModel:
    """Two steps, two states equally likely at each. State 0 ("mixed": a few risky steps among calm
    ones) ends the episode 2% of the time under the agent; state 1 ("risky") half the time. An
    intervention makes the step safe; success is credited at the last step."""
    T, S = 2, 2
    transitions = np.zeros((T, S, 2, S + 1))
    transitions[0, :, :, :S] = 0.5
    transitions[0, 0, 0] = [0.49, 0.49, 0.02]
    transitions[0, 1, 0] = [0.25, 0.25, 0.5]
    transitions[1, :, :, S] = 1.0
    rewards = np.zeros((T, S, 2))
    rewards[1] = [[0.98, 1.0], [0.5, 1.0]]
    counts = np.zeros((T, S, 2), dtype=np.int64)
    counts[..., 0], counts[..., 1] = rows_base, rows_intervene
    return TabularModel(transitions=transitions, rewards=rewards, start=np.array([0.5, 0.5]),
                        success=rewards.copy(), counts=counts)


def test_the_penalty_is_z_half_range_over_root_rows_with_the_borrowed_rows_counted():
    model = mixed_and_risky_model()
    model.counts[1, 0, 1] = 0  # an unseen cell counts one row
    model.transition_backoff = 5.0  # each per-step estimate borrows up to 5 rows pooled over steps
    rows = effective_rows(model)
    assert rows[0, 1, 0] == 70 + 5 and rows[0, 0, 1] == 30 + 0  # step 1's 0 rows there: nothing to borrow
    assert rows[1, 0, 1] == 0 + 5  # borrows 5 of step 0's 30
    penalised = pessimistic(model, 2.0)
    assert np.array_equal(penalised.rewards[..., 0], model.rewards[..., 0])  # the agent's own action: as estimated
    assert penalised.rewards[1, 1, 1] == pytest.approx(1.0 - 2.0 * 0.5 * np.sqrt(1 / 75 + 1 / 35))
    assert penalised.rewards[0, 0, 1] == pytest.approx(0.0 - 2.0 * 0.5 * np.sqrt(1 / 75 + 1 / 30))
    assert penalised.rewards[1, 0, 1] == pytest.approx(1.0 - 2.0 * 0.5 * np.sqrt(1 / 75 + 1 / 5))
    assert pessimistic(model, 0.0) is model
    with pytest.raises(ValueError, match="pessimism=-1"):
        pessimistic(model, -1.0)


@pytest.mark.parametrize("budget", [1, 2])
def test_a_thin_small_gain_is_not_taken_and_a_large_one_is(budget):
    model = mixed_and_risky_model()
    point, pessimist = solve_exact(model, budget), solve(model, budget, pessimism=1.0)
    if budget == 2:  # with budget to spare the point estimate spends on the mixed state's 2% gain
        assert point.policy[:, 0, 1:].any()
    # One standard error: intervening needs a gain above 0.5 * sqrt(1/30 + 1/70) = 0.109.
    assert not pessimist.policy[:, 0].any()
    assert pessimist.policy[:, 1, 1:].all()
    # Reported on the model itself, not the penalised one.
    unpenalised = evaluate(model, pessimist.policy, budget, hard_budget=True)
    assert pessimist.expected_success == pytest.approx(unpenalised.expected_success)
    assert pessimist.expected_interventions == pytest.approx(unpenalised.expected_interventions)
    assert pessimist.expected_interventions <= point.expected_interventions
    # With ten times the rows the same 2% gain is clear of one standard error again (budget 2).
    plenty = solve(mixed_and_risky_model(3000, 7000), 2, pessimism=1.0)
    assert plenty.policy[:, 0, 1:].any()


def test_the_pessimistic_policy_is_the_best_of_every_policy_on_the_penalised_model():
    model, budget = mixed_and_risky_model(), 1
    penalised = pessimistic(model, 1.5)
    found = solve(model, budget, pessimism=1.5)
    T, S = model.horizon, model.n_states
    best = -np.inf
    for bits in itertools.product((0.0, 1.0), repeat=T * S * budget):  # every deterministic policy
        policy = np.zeros((T, S, budget + 1))
        policy[:, :, 1:] = np.reshape(bits, (T, S, budget))
        best = max(best, evaluate(penalised, policy, budget, hard_budget=True).expected_return)
    assert evaluate(penalised, found.policy, budget, hard_budget=True).expected_return == pytest.approx(best)


def test_pessimism_zero_is_the_point_solve():
    model = mixed_and_risky_model()
    for budget in (1, 2):
        assert np.array_equal(solve(model, budget, pessimism=0.0).policy, solve_exact(model, budget).policy)
