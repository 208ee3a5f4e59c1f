"""Advice at cost c (lambda = c, no budget) against every deterministic policy, enumerated."""

import itertools
import json

import numpy as np
import polars as pl
import pytest

from helper.solve.solve_command import SolveConfig, run
from tabular_rl import Discretizer, Solution, TabularModel, estimate, evaluate, label, simulate
from tabular_rl.solvers import advice_price, solve_exact, solve_priced, solve_spending
from trajectories.shards import mark_complete


def random_model(seed: int, T: int = 3, S: int = 2) -> TabularModel:
    rng = np.random.default_rng(seed)
    return TabularModel(transitions=rng.dirichlet(np.ones(S + 1), size=(T, S, 2)),
                        rewards=rng.random((T, S, 2)), start=rng.dirichlet(np.ones(S)))


def best_by_enumeration(model: TabularModel, price: float, value: str = "expected_return") -> float:
    """max over all 2^(T*S) deterministic policies of value - price * interventions."""
    T, S = model.horizon, model.n_states
    best = -np.inf
    for bits in itertools.product((0.0, 1.0), repeat=T * S):
        ev = evaluate(model, np.array(bits).reshape(T, S, 1), 0, hard_budget=False)
        best = max(best, getattr(ev, value) - price * ev.expected_interventions)
    return best


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("price", [0.0, 0.1, 0.3, 0.7])
def test_priced_policy_is_the_best_deterministic_policy(seed, price):
    model = random_model(seed)
    sol = solve_priced(model, price)
    assert sol.expected_return - price * sol.expected_interventions == pytest.approx(
        best_by_enumeration(model, price), abs=1e-12)
    # The table is budget-left independent (no budget binds) and never intervenes with nothing left.
    assert sol.budget == model.horizon and np.all(sol.policy[:, :, 0] == 0)
    assert np.all(sol.policy[:, :, 1:] == sol.policy[:, :, 1:2])


def best_within_budget(model: TabularModel, budget: int, price: float) -> float:
    """max over every deterministic hard-budget policy (an action per step, state and budget left
    1..budget) of return - price * interventions."""
    T, S = model.horizon, model.n_states
    best = -np.inf
    for bits in itertools.product((0.0, 1.0), repeat=T * S * budget):
        policy = np.zeros((T, S, budget + 1))
        policy[:, :, 1:] = np.array(bits).reshape(T, S, budget)
        ev = evaluate(model, policy, budget, hard_budget=True)
        best = max(best, ev.expected_return - price * ev.expected_interventions)
    return best


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("budget", [1, 2])
@pytest.mark.parametrize("price", [0.0, 0.15, 0.4])
def test_priced_budgeted_policy_is_the_best_deterministic_one(seed, budget, price):
    model = random_model(seed)
    sol = solve_exact(model, budget, price)
    assert sol.expected_return - price * sol.expected_interventions == pytest.approx(
        best_within_budget(model, budget, price), abs=1e-12)
    assert sol.expected_interventions <= budget


def test_spending_target_finds_the_cheapest_price_that_meets_it():
    model = random_model(5, T=4, S=3)
    unpriced = solve_exact(model, 2)
    assert solve_spending(model, 2, 2.0).expected_return == unpriced.expected_return  # price 0 meets it
    target = unpriced.expected_interventions - 0.5
    sol = solve_spending(model, 2, target)
    assert sol.expected_interventions <= target and sol.lam > 0
    # A slightly lower price spends more than the target: the price is the cheapest that meets it.
    assert solve_exact(model, 2, sol.lam * 0.999).expected_interventions > target
    assert solve_spending(model, 2, 0.0).expected_interventions == 0.0


def test_a_higher_price_buys_less_advice():
    model = random_model(7, T=4, S=3)
    spent = [solve_priced(model, p).expected_interventions for p in (0.0, 0.05, 0.2, 0.5, 2.0)]
    assert spent == sorted(spent, reverse=True) and spent[-1] == 0.0


def test_bad_prices_are_refused():
    with pytest.raises(ValueError, match="price"):
        solve_priced(random_model(0), -0.1)
    with pytest.raises(ValueError, match="advice_cost"):
        advice_price(float("nan"), "success", 4)
    assert advice_price(0.3, "success", 4) == pytest.approx(0.075) and advice_price(0.3, "reward", 4) == 0.3


def test_solve_command_maximises_accuracy_minus_c_times_advice_rate(tmp_path):
    """Success is the mean per-step reward (accuracy); the command's policy maximises
    success - c * interventions / T over every deterministic policy of the estimated model."""
    truth = random_model(3, T=3, S=2)
    truth.rewards[:] = np.clip(truth.rewards, 0, 1)
    frame = simulate(truth, 400, budget=3, behaviour=0.4, seed=1).drop("state")
    frame = frame.with_columns(pl.col("reward").round(0))  # per-question correctness, 0 or 1
    frame = frame.with_columns((pl.col("reward").sum().over("episode_id") / 3).alias("success"))
    data = tmp_path / "trajectories"
    data.mkdir()
    frame.write_parquet(data / "shard-000.parquet")
    mark_complete(data)
    c = 0.3
    summary = run(SolveConfig(data=str(data), advice_cost=c, bins=2, backoff="0", out=str(tmp_path / "solve")))
    (sol,) = summary["solutions"]
    disc = Discretizer.load(tmp_path / "solve" / "discretizer.json")
    model = estimate(frame, disc, backoff=0.0)
    assert sol["method"] == "priced" and sol["advice_cost"] == c and sol["lambda"] == pytest.approx(c / 3)
    assert sol["total_score"] == pytest.approx(best_by_enumeration(model, c / 3, "expected_success"), abs=1e-9)
    # The table is written where distill looks for it, and its labels follow it.
    table = Solution.load(tmp_path / "solve" / "policy_c3.npz", disc)
    labels = pl.read_parquet(tmp_path / "solve" / "labels.parquet")
    again = label(labels.drop("optimal_intervene_c3"), table)["optimal_intervene"]
    assert labels["optimal_intervene_c3"].to_list() == again.to_list() and labels.height == frame.height
    assert json.loads((tmp_path / "solve" / "solution.json").read_text())["config"]["advice_cost"] == c
