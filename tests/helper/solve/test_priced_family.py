"""The priced family that ``helpgate calibrate --family priced`` tests (``helper.solve.priced_family``): on plain-cue's
true model each member is the best capped policy at its price against every deterministic policy (brute force), the
order runs from most to least help and is fixed by the model alone, and the ends are the C = cap solve and a gate
that never intervenes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from examples.plain_cue import RISK_ODDS, SLIP
from examples.plain_cue_optimum import RISKS, true_model
from helper.solve.priced_family import priced_tables, stopping_price
from tabular_rl.solvers import solve_exact


def every_policy(horizon: int, cap: int):
    """(success, expected interventions) of every deterministic (crossing, risk, budget left) policy, exactly."""
    cells = [(t, r, b) for t in range(horizon) for r in RISKS for b in range(1, cap + 1)]
    sequences = [(seq, float(np.prod([RISK_ODDS[r] for r in seq]))) for seq in itertools.product(RISKS, repeat=horizon)]
    out = []
    for choice in itertools.product((False, True), repeat=len(cells)):
        policy = dict(zip(cells, choice))
        success = spend = 0.0
        for seq, weight in sequences:
            left, alive = cap, 1.0
            for t, risk in enumerate(seq):
                if left and policy[(t, risk, left)]:
                    left -= 1
                    spend += weight * alive  # a crossing is reached only if no slip came before
                else:
                    alive *= 1.0 - SLIP[risk]
            success += weight * alive
        out.append((success, spend))
    return np.array(out)


@pytest.mark.parametrize(("horizon", "cap"), [(2, 2), (3, 1), (2, 1)])
def test_each_member_is_the_best_policy_at_its_price(horizon, cap):
    model = true_model(horizon)
    members = priced_tables(model, cap, steps=25)
    brute = every_policy(horizon, cap)
    for price, solution in members:
        best = float(np.max(brute[:, 0] - price * brute[:, 1]))
        assert solution.expected_success - price * solution.expected_interventions == pytest.approx(best, abs=1e-12)
        # The member is one of the enumerated policies (same success and spend), not a value that no gate reaches.
        assert np.any(np.isclose(brute[:, 0], solution.expected_success, atol=1e-12)
                      & np.isclose(brute[:, 1], solution.expected_interventions, atol=1e-12))


def test_the_order_is_most_help_first_and_fixed_by_the_model():
    model = true_model()
    members = priced_tables(model, 3)
    prices = [p for p, _ in members]
    assert prices == sorted(prices) and len(set(prices)) == len(prices)
    spend = [s.expected_interventions for _, s in members]
    success = [s.expected_success for _, s in members]
    assert all(a >= b - 1e-12 for a, b in zip(spend, spend[1:]))
    assert all(a >= b - 1e-12 for a, b in zip(success, success[1:]))
    # Ends: price 0 is the budgeted optimum at the cap; the last member never intervenes.
    assert prices[0] == 0.0 and np.array_equal(members[0][1].policy, solve_exact(model, 3).policy)
    assert spend[-1] == 0.0 and spend[-2] > 0.0
    # No two members are the same gate, and a second build gives the same family (nothing random, no data read).
    assert not any(np.array_equal(a.policy, b.policy) for (_, a), (_, b) in itertools.combinations(members, 2))
    again = priced_tables(true_model(), 3)
    assert [p for p, _ in again] == prices and all(np.array_equal(a.policy, b.policy)
                                                   for (_, a), (_, b) in zip(members, again))


def test_the_stopping_price_is_where_interventions_stop():
    model = true_model()
    top = stopping_price(model, 3)
    assert solve_exact(model, 3, top).expected_interventions == 0.0
    assert solve_exact(model, 3, top * (1 - 1e-6)).expected_interventions > 0.0
    with pytest.raises(ValueError, match="cap=-1"):
        priced_tables(model, -1)
