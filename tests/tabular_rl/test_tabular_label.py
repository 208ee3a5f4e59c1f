"""label(): the solved action for every logged row."""

import numpy as np
import polars as pl
import pytest

from tabular_rl import Discretizer, TabularModel, estimate, label, simulate, solve_exact, solve_lagrangian


@pytest.fixture(scope="module")
def solved():
    rng = np.random.default_rng(4)
    T, S = 5, 3
    true = TabularModel(
        transitions=rng.dirichlet(np.ones(S + 1) * 2, size=(T, S, 2)),
        rewards=rng.random((T, S, 2)),
        start=np.full(S, 1 / S),
    )
    df = simulate(true, 3000, budget=4, behaviour=0.4, seed=1)
    disc = Discretizer(S, "uniform").fit(df["prm_score"], df["step"])
    model = estimate(df, disc)
    return df, disc, model


def test_labels_are_the_policy_at_each_rows_state_and_budget(solved):
    df, disc, model = solved
    sol = solve_exact(model, 2)
    out = label(df, sol)
    assert out.columns == df.columns + ["optimal_intervene"]
    # Row by row in plain Python, straight from the documented rule.
    states = disc.transform(df["prm_score"], df["step"])
    expected = []
    for t, s, b in zip(df["step"].to_list(), states.tolist(), df["budget_left"].to_list()):
        expected.append(b > 0 and bool(sol.policy[min(t, sol.horizon - 1), s, min(b, 2)]))
    assert out["optimal_intervene"].to_list() == expected
    assert out["optimal_intervene"].any() and not out["optimal_intervene"].all()


def test_budget_left_is_clipped_and_zero_budget_means_base(solved):
    _, _, model = solved
    sol = solve_exact(model, 1)
    t, s = np.argwhere(sol.policy[:, :3, 1] == 1)[0]  # a (step, score bin) where C=1 intervenes
    score = (s + 0.5) / 3
    rows = pl.DataFrame({"step": [t, t, t, 99], "prm_score": [score] * 4, "budget_left": [0, 1, 7, 1]})
    got = label(rows, sol)["optimal_intervene"].to_list()
    assert got[:3] == [False, True, True]  # 7 left acts as 1 left for a C=1 helper
    assert got[3] == bool(sol.policy[-1, s, 1])  # past the horizon: the last step's action


def test_several_budgets_and_stochastic_policies(solved):
    df, _, model = solved
    sols = [solve_exact(model, 1), solve_exact(model, 3), solve_lagrangian(model, 2)]
    with pytest.raises(ValueError, match="share a budget"):
        label(df, [sols[0], solve_lagrangian(model, 1)])
    out = label(df, sols[:2])
    assert {"optimal_intervene_c1", "optimal_intervene_c3"} <= set(out.columns)
    lag = label(df, sols[2], column="lag")["lag"].to_numpy()
    states = sols[2].discretizer.transform(df["prm_score"], df["step"])
    prob = sols[2].policy[np.minimum(df["step"].to_numpy(), 4), states, 0]
    np.testing.assert_array_equal(lag, (prob > 0.5) & (df["budget_left"].to_numpy() > 0))


def test_explicit_states_and_missing_discretizer(solved):
    df, disc, model = solved
    sol = solve_exact(model, 1)
    states = disc.transform(df["prm_score"], df["step"])
    a = label(df.drop("prm_score"), sol, states=states)["optimal_intervene"]
    assert a.equals(label(df, sol)["optimal_intervene"])
    sol.discretizer = None
    with pytest.raises(ValueError, match="pass states="):
        label(df, sol)
