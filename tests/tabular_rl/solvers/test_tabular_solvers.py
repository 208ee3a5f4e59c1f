"""Solvers against brute force and against each other; hard budget checked by rollouts."""

import itertools

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tabular_rl import (
    Discretizer,
    TabularModel,
    estimate,
    evaluate,
    policy_values,
    simulate,
    solve,
    solve_exact,
    solve_lagrangian,
    solve_lp,
)


def make_model(seed, T, S, integer_rewards=False, sparse=False):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(S + 1), size=(T, S, 2))
    if sparse:  # some impossible transitions, renormalised
        p = np.where(rng.random(p.shape) < 0.4, 0.0, p)
        p[..., -1] += 1e-3
        p /= p.sum(-1, keepdims=True)
    r = rng.integers(0, 3, (T, S, 2)).astype(float) if integer_rewards else rng.random((T, S, 2))
    return TabularModel(
        transitions=p,
        rewards=r,
        start=rng.dirichlet(np.ones(S)),
        success=rng.random((T, S, 2)),
    )


def path_enumeration(model, choice, C):
    """Expected (return, interventions) of a budget-aware policy, summing over every path.

    ``choice[(t, s, b)]`` is the action for b >= 1; b = 0 always plays base. Pure Python: it shares
    no code with the solvers."""
    P, R, T, S = model.transitions.tolist(), model.rewards.tolist(), model.horizon, model.n_states
    total = [0.0, 0.0]

    def walk(t, s, b, prob):
        a = choice[(t, s, b)] if b > 0 else 0
        total[0] += prob * R[t][s][a]
        total[1] += prob * a
        if t + 1 < T:
            for s2 in range(S):
                if P[t][s][a][s2] > 0:
                    walk(t + 1, s2, b - a, prob * P[t][s][a][s2])

    for s in range(S):
        walk(0, s, C, model.start[s])
    return total


sizes = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2)).filter(lambda x: x[0] * x[1] * x[2] <= 9)


@settings(max_examples=40, deadline=None)
@given(sizes, st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
def test_exact_equals_brute_force_over_all_deterministic_policies(size, seed, integer_rewards, sparse):
    T, S, C = size
    model = make_model(seed, T, S, integer_rewards, sparse)
    keys = [(t, s, b) for t in range(T) for s in range(S) for b in range(1, C + 1)]
    best = max(
        path_enumeration(model, dict(zip(keys, acts)), C)[0] for acts in itertools.product((0, 1), repeat=len(keys))
    )
    sol = solve_exact(model, C)
    assert sol.expected_return == pytest.approx(best, abs=1e-9)
    assert float(model.start @ sol.values[0, :, C]) == pytest.approx(best, abs=1e-9)
    # The solver's own policy, evaluated path by path, gives what the solver reports.
    own = {k: int(sol.policy[k]) for k in keys}
    ret, ints = path_enumeration(model, own, C)
    assert ret == pytest.approx(sol.expected_return, abs=1e-9)
    assert ints == pytest.approx(sol.expected_interventions, abs=1e-9)
    assert np.all(sol.policy[:, :, 0] == 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 4), st.integers(0, 2**32 - 1), st.booleans())
def test_lp_equals_lagrangian_mixture(T, S, C, seed, integer_rewards):
    model = make_model(seed, T, S, integer_rewards)
    lag, lp = solve_lagrangian(model, C), solve_lp(model, C)
    assert lp.expected_return == pytest.approx(lag.expected_return, abs=1e-6)
    assert lag.expected_interventions <= C + 1e-9 and lp.expected_interventions <= C + 1e-7
    # The mixture really is the two deterministic policies run whole-episode with weight mix.
    more, fewer = (evaluate(model, p[..., None], C, hard_budget=False) for p in lag.policies)
    assert lag.mix * more.expected_return + (1 - lag.mix) * fewer.expected_return == pytest.approx(lag.expected_return)
    # ... and the per-step policy stored in the Solution has the same value and interventions.
    per_step = evaluate(model, lag.policy, C, hard_budget=False)
    assert per_step.expected_return == pytest.approx(lag.expected_return, abs=1e-9)
    assert per_step.expected_interventions == pytest.approx(lag.expected_interventions, abs=1e-9)
    assert float(model.start @ lp.values[0, :, 0]) == pytest.approx(lp.expected_return, abs=1e-9)
    # If the budget binds, it is spent exactly.
    unconstrained = solve_lagrangian(model, T)
    if unconstrained.expected_interventions > C:
        assert lag.expected_interventions == pytest.approx(C, abs=1e-9)
    # A budget in expectation relaxes the hard one.
    assert lp.expected_return >= solve_exact(model, C).expected_return - 1e-7


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_exact_is_monotone_in_budget_and_reaches_unconstrained(T, S, seed):
    model = make_model(seed, T, S)
    returns = [solve_exact(model, c).expected_return for c in range(T + 2)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(returns))
    assert returns[T] == pytest.approx(solve_lagrangian(model, T).expected_return, abs=1e-9)
    never = evaluate(model, np.zeros((T, S, 1)), 0, hard_budget=False).expected_return
    assert returns[0] == pytest.approx(never, abs=1e-12)
    sol = solve_exact(model, 2)
    np.testing.assert_allclose(policy_values(model, sol.policy, hard_budget=True), sol.values, atol=1e-12)


def test_exact_never_exceeds_the_budget_in_rollouts_of_the_estimated_model():
    rng = np.random.default_rng(5)
    T, S = 8, 4
    # Interventions pay off everywhere, so the unconstrained helper would intervene every step.
    rewards = np.stack([rng.random((T, S)) * 0.2, 0.5 + rng.random((T, S)) * 0.2], axis=-1)
    true = TabularModel(
        transitions=rng.dirichlet(np.ones(S + 1) * 3, size=(T, S, 2)), rewards=rewards, start=np.full(S, 1 / S)
    )
    df = simulate(true, 4000, budget=T, behaviour=0.5, seed=2)
    model = estimate(df, Discretizer(S, "uniform").fit(df["prm_score"]))
    for C in (0, 1, 3):
        sol = solve_exact(model, C)
        runs = simulate(model, 20_000, budget=C, behaviour=sol, seed=9 + C)
        per_episode = runs.group_by("episode_id").agg(pl.col("intervened").sum())["intervened"]
        assert per_episode.max() <= C
        assert not runs.filter(pl.col("budget_left") == 0)["intervened"].any()
        se = per_episode.std() / np.sqrt(per_episode.len()) + 1e-9
        assert abs(per_episode.mean() - sol.expected_interventions) < 5 * se
        if C:
            assert sol.expected_interventions > C - 1  # the budget is actually used


def test_solve_dispatch_and_errors():
    model = make_model(0, 3, 2)
    for method in ("exact", "lagrangian", "lp"):
        sol = solve(model, 1, method)
        assert sol.method == method and sol.budget == 1
        assert sol.policy.shape == (3, 2, 2 if method == "exact" else 1)
        assert 0.0 <= sol.expected_success  # success table evaluated alongside the reward
    with pytest.raises(ValueError, match="method='greedy'"):
        solve(model, 1, "greedy")
    with pytest.raises(ValueError, match="budget=-1"):
        solve_exact(model, -1)


def test_solution_save_load(tmp_path):
    model = make_model(3, 4, 3)
    lag = solve_lagrangian(model, 1)
    lag.save(tmp_path / "p.npz")
    back = type(lag).load(tmp_path / "p.npz")
    np.testing.assert_array_equal(back.policy, lag.policy)
    np.testing.assert_array_equal(back.policies[0], lag.policies[0])
    assert back.summary() == lag.summary()
