"""The tiered solvers against brute force, against the two-action solver, and against each other."""

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tiered_models import random_tiered_model

from tabular_rl import TabularModel, solve_exact
from tabular_rl.tiered import (
    Resources,
    TieredModel,
    evaluate_table,
    solve_tiered_exact,
    solve_tiered_lagrangian,
    table_values,
)


def reachable_decisions(T, S, prices, budget, caps):
    """Every (step, state, budget left, calls used per kind) an episode can reach, and the actions it can
    afford there. Pure Python on tuples: it shares no code with ``Resources``."""
    def affordable(b, used):
        return [0] + [k + 1 for k in range(len(prices))
                      if prices[k] <= b and (caps[k] is None or used[k] < caps[k])]

    level = {(budget, (0,) * len(prices))}
    out = {}
    for t in range(T):
        for b, used in level:
            for s in range(S):
                out[(t, s, b, used)] = affordable(b, used)
        level = {(b - (prices[a - 1] if a else 0), tuple(u + (a == k + 1) for k, u in enumerate(used)))
                 for b, used in level for a in affordable(b, used)}
    return out


def path_value(model, prices, budget, policy):
    """Expected (return, cost) of ``policy[(t, s, b, used)]``, summed over every path."""
    P, R, T, S = model.transitions.tolist(), model.rewards.tolist(), model.horizon, model.n_states
    total = [0.0, 0.0]

    def walk(t, s, b, used, prob):
        a = policy[(t, s, b, used)]
        price = prices[a - 1] if a else 0
        total[0] += prob * R[t][s][a]
        total[1] += prob * price
        if t + 1 < T:
            after = tuple(u + (a == k + 1) for k, u in enumerate(used))
            for s2 in range(S):
                if P[t][s][a][s2] > 0:
                    walk(t + 1, s2, b - price, after, prob * P[t][s][a][s2])

    for s in range(S):
        walk(0, s, budget, (0,) * len(prices), model.start[s])
    return total


caps_of = st.one_of(st.none(), st.integers(0, 1))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.lists(st.integers(0, 2), min_size=1, max_size=2),
       st.integers(0, 3), st.lists(caps_of, min_size=2, max_size=2), st.integers(0, 2**32 - 1), st.booleans())
def test_exact_equals_brute_force_over_all_deterministic_policies(T, S, prices, budget, caps, seed, sparse):
    K = len(prices)
    caps = caps[:K]
    decisions = reachable_decisions(T, S, prices, budget, caps)
    keys = list(decisions)
    assume(np.prod([len(decisions[k]) for k in keys]) <= 3000)
    model = random_tiered_model(seed, T, S, K, sparse)
    best = max(path_value(model, prices, budget, dict(zip(keys, acts)))[0]
               for acts in itertools.product(*(decisions[k] for k in keys)))
    resources = Resources.of(prices, budget, caps)
    sol = solve_tiered_exact(model, resources)
    assert sol.expected_return == pytest.approx(best, abs=1e-9)
    assert float(model.start @ sol.values[0, :, resources.full]) == pytest.approx(best, abs=1e-9)
    # The solver's own table, read at each reachable decision and walked path by path, gives what it reports.
    own = {(t, s, b, used): int(sol.action(t, s, b, {k: caps[k - 1] - used[k - 1] for k in resources.capped}))
           for (t, s, b, used) in keys}
    assert all(own[k] in decisions[k] for k in keys)
    ret, cost = path_value(model, prices, budget, own)
    assert ret == pytest.approx(sol.expected_return, abs=1e-9)
    assert cost == pytest.approx(sol.expected_cost, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_one_kind_at_price_one_is_the_two_action_exact_solve(T, S, C, seed):
    rng = np.random.default_rng(seed)
    two = TabularModel(transitions=rng.dirichlet(np.ones(S + 1), size=(T, S, 2)), rewards=rng.random((T, S, 2)),
                       start=rng.dirichlet(np.ones(S)), success=rng.random((T, S, 2)))
    reference = solve_exact(two, C)
    tiered = solve_tiered_exact(TieredModel.from_tabular(two), Resources.of((1,), C))
    np.testing.assert_array_equal(tiered.tables[0], reference.policy.astype(int))
    np.testing.assert_allclose(tiered.values, reference.values, rtol=0, atol=1e-12)
    assert tiered.expected_return == pytest.approx(reference.expected_return, abs=1e-12)
    assert tiered.expected_success == pytest.approx(reference.expected_success, abs=1e-12)
    assert tiered.expected_cost == pytest.approx(reference.expected_interventions, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(0, 6), st.booleans(),
       st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_lagrangian_is_feasible_spends_at_most_its_target_and_is_worth_at_most_the_exact(T, S, K, budget, capped,
                                                                                           share, seed):
    model = random_tiered_model(seed, T, S, K)
    prices = tuple(range(1, K + 1))
    resources = Resources.of(prices, budget, caps=(1,) + (None,) * (K - 1) if capped else None)
    exact = solve_tiered_exact(model, resources)
    target = share * budget
    lag = solve_tiered_lagrangian(model, resources, target=target)
    assert lag.expected_cost <= target + 1e-9
    assert lag.expected_return <= exact.expected_return + 1e-9
    # The mixture is its two tables played whole episodes with weights mix, 1 - mix.
    runs = [evaluate_table(model, resources, table) for table in lag.tables]
    if len(runs) == 2:
        mixed = lag.mix * runs[0].expected_return + (1 - lag.mix) * runs[1].expected_return
        assert mixed == pytest.approx(lag.expected_return, abs=1e-12)
        # It mixes only where the guarded table below the breakpoint spends past the target, and then spends it all.
        assert lag.expected_cost == pytest.approx(target, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_exact_values_match_evaluation_and_grow_with_the_budget(T, S, K, seed):
    model = random_tiered_model(seed, T, S, K)
    prices = tuple(range(1, K + 1))
    returns = []
    for budget in range(0, T * K + 2):
        resources = Resources.of(prices, budget)
        sol = solve_tiered_exact(model, resources)
        np.testing.assert_allclose(table_values(model, resources, sol.tables[0]), sol.values, atol=1e-12)
        returns.append(sol.expected_return)
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(returns))
    # Budget 0: the agent alone; every kind's cap at 0 is the same world.
    alone = solve_tiered_exact(model, Resources.of(prices, T * K, caps=(0,) * K))
    assert alone.expected_return == pytest.approx(returns[0], abs=1e-12)
    assert alone.expected_calls[1:].sum() == 0


def test_fractional_prices_are_the_same_problem_as_their_whole_multiples():
    model = random_tiered_model(3, 4, 3, 2)
    halves = solve_tiered_exact(model, Resources.of((0.5, 1.25), 2.5))
    whole = solve_tiered_exact(model, Resources.of((2, 5), 10))
    assert halves.expected_return == pytest.approx(whole.expected_return, abs=1e-12)
    assert halves.expected_cost == pytest.approx(whole.expected_cost / 4, abs=1e-12)
    np.testing.assert_array_equal(halves.tables[0], whole.tables[0])


def test_a_tie_goes_to_the_cheaper_help_and_a_useless_help_is_never_called():
    T, S = 3, 2
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(S + 1), size=(T, S, 1))
    # Kinds 1 and 2 do exactly the same (better than the agent); kind 3 does exactly what the agent does.
    transitions = np.concatenate([p, p, p, p], axis=2)
    rewards = np.stack([np.zeros((T, S)), np.ones((T, S)), np.ones((T, S)), np.zeros((T, S))], axis=-1)
    model = TieredModel(transitions=transitions, rewards=rewards, start=np.full(S, 0.5), kinds=("a", "b", "c"))
    sol = solve_tiered_exact(model, Resources.of((2, 1, 0), 6))
    assert sol.expected_calls[1] == 0 and sol.expected_calls[3] == 0 and sol.expected_calls[2] > 0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(2, 3), st.integers(0, 6), st.integers(0, 2**32 - 1))
def test_a_kind_capped_at_zero_is_a_kind_taken_away(T, S, K, budget, seed):
    model = random_tiered_model(seed, T, S, K)
    prices = tuple(range(1, K + 1))
    for k in range(1, K + 1):
        kept = [j for j in range(1, K + 1) if j != k]
        without = solve_tiered_exact(model.only(kept), Resources.of([prices[j - 1] for j in kept], budget))
        capped = solve_tiered_exact(model, Resources.of(prices, budget, caps=[0 if j == k else None
                                                                             for j in range(1, K + 1)]))
        assert capped.expected_return == pytest.approx(without.expected_return, abs=1e-12)
        assert capped.expected_calls[k] == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(0, 6), st.integers(0, 2**32 - 1))
def test_a_price_multiplier_buys_less_help_and_never_more_return(T, S, K, budget, seed):
    model = random_tiered_model(seed, T, S, K)
    resources = Resources.of(tuple(range(1, K + 1)), budget)
    solutions = [solve_tiered_exact(model, resources, lam) for lam in (0.0, 0.05, 0.2, 1.0, 100.0)]
    costs = [sol.expected_cost for sol in solutions]
    returns = [sol.expected_return for sol in solutions]
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(costs))
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(returns))
    assert costs[-1] == 0.0  # no call gains 100 per unit of price when rewards lie in [0, 1]
