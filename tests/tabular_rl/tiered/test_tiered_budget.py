"""No episode of a tiered helper exceeds a kind's cap or the total budget, counted in rollouts."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiered_models import random_tiered_model

from tabular_rl.tiered import (
    Resources,
    TieredModel,
    TieredSolution,
    check_table,
    simulate_tiered,
    solve_tiered_exact,
    solve_tiered_lagrangian,
)


def generous_model(seed: int, T: int, S: int, K: int) -> TieredModel:
    """Every kind of help pays far more than the agent acting, so an unbudgeted helper would call help at
    every step: the budget and the caps are what stops it."""
    model = random_tiered_model(seed, T, S, K)
    model.rewards[..., 1:] += 1.0
    return model


def spent_per_episode(rows: pl.DataFrame, kinds) -> pl.DataFrame:
    return rows.group_by("episode_id").agg(
        pl.col("cost").sum().alias("spent"),
        *((pl.col("help_kind") == k).sum().alias(k) for k in kinds),
    )


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(1, 3), st.sampled_from([0, 0.5, 1, 2.5, 4]),
       st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=3, max_size=3),
       st.sampled_from(["exact", "lagrangian"]), st.integers(0, 2**32 - 1))
def test_rollouts_never_exceed_a_cap_or_the_budget(T, S, K, budget, caps, method, seed):
    model = generous_model(seed, T, S, K)
    prices = (0.5, 1, 2)[:K]
    resources = Resources.of(prices, budget, caps[:K], horizon=T)
    solver = solve_tiered_exact if method == "exact" else solve_tiered_lagrangian
    sol = solver(model, resources)
    rows = simulate_tiered(model, resources, 2000, behaviour=sol, seed=seed % 1000)
    per_episode = spent_per_episode(rows, model.kinds)
    assert per_episode["spent"].max() <= budget + 1e-9
    for k, cap in zip(model.kinds, caps[:K]):
        if cap is not None:
            assert per_episode[k].max() <= cap
    # The exact evaluation agrees with what the rollouts spend and earn (5 standard errors); a path rarer than the
    # 2000 rollouts can show moves the exact value without any spread in the sample, so each bound also allows
    # the whole range times 3 / 2000 (the "rule of three" on an event never seen).
    returns = rows.group_by("episode_id").agg(pl.col("reward").sum())["reward"]
    unseen = 3 / 2000
    reward_range = T * float(np.ptp(model.rewards))
    assert abs(returns.mean() - sol.expected_return) < 5 * returns.std() / np.sqrt(2000) + reward_range * unseen
    spent = per_episode["spent"]
    assert abs(spent.mean() - sol.expected_cost) < 5 * spent.std() / np.sqrt(2000) + budget * unseen + 1e-9


def test_the_rollout_count_sees_a_table_that_overspends():
    """The check above can fail: a table forced to call the dearest help everywhere is refused by
    ``check_table``, and, played anyway, its rollouts spend past the budget."""
    model = generous_model(1, 4, 2, 2)
    resources = Resources.of((1, 2), 3, horizon=4)
    greedy = np.full((4, 2, resources.size), 2)
    with pytest.raises(ValueError, match="cannot afford"):
        check_table(greedy, model, resources)
    forced = TieredSolution(method="forced", kinds=model.kinds, resources=resources, tables=(greedy,), mix=1.0,
                            expected_return=0.0, expected_success=0.0, expected_cost=0.0,
                            expected_calls=np.zeros(3))
    rows = simulate_tiered(model, resources, 200, behaviour=forced, seed=0)
    assert spent_per_episode(rows, model.kinds)["spent"].max() > 3


def test_exploration_calls_every_kind_and_stays_within_budget_and_caps():
    model = random_tiered_model(2, 6, 3, 3)
    resources = Resources.of((1, 2, 4), 6, caps=(None, 2, 1), horizon=6)
    rows = simulate_tiered(model, resources, 3000, behaviour=0.5, seed=4)
    per_episode = spent_per_episode(rows, model.kinds)
    assert per_episode["spent"].max() <= 6
    assert per_episode["kind2"].max() <= 2 and per_episode["kind3"].max() <= 1
    assert set(rows["help_kind"].drop_nulls().unique()) == set(model.kinds)


def test_a_saved_solution_loads_and_answers_as_before(tmp_path):
    model = generous_model(4, 5, 3, 3)
    resources = Resources.of((0.5, 1, 2), 3, caps=(None, 1, None), horizon=5)
    for sol in (solve_tiered_exact(model, resources), solve_tiered_lagrangian(model, resources, target=1.0)):
        sol.save(tmp_path / "tiered.npz")
        back = TieredSolution.load(tmp_path / "tiered.npz")
        assert back.summary() == sol.summary()
        for table in range(len(sol.tables)):
            np.testing.assert_array_equal(back.tables[table], sol.tables[table])
        # The gate's lookup by name and by index, at a budget left in the user's unit (a fraction here).
        assert back.kind(2, 1, 1.5, {"kind2": 1}) == sol.kind(2, 1, 1.5, {2: 1})
        assert back.kind(0, 0, 0.0, {"kind2": 0}) is None  # nothing left: the agent acts
