"""A priced intervention: maximise return - price * interventions, with no budget.

AGILE scores an agent by total score = accuracy - c * advice rate. With success = accuracy (the
mean per-question reward over H questions) that is success - (c / H) * interventions: the
Lagrangian of the budgeted problem at the fixed multiplier lambda = c / H, so the best policy at
advice cost c is ``greedy_policy(model, c / H)`` (the same backward induction the Lagrangian solver
bisects over), and no budget is needed. ``advice_price`` converts c into lambda per objective.

The table is returned in the hard-budget layout with budget = horizon (a budget that can never
bind, since an episode has at most ``horizon`` decisions) and the same action at every budget
left >= 1, so ``label``, ``helpgate distill`` and the gate's ``table`` backend read it unchanged.

``solve_spending`` keeps the hard budget and finds the price instead: the cheapest price at which
the budgeted policy expects to spend no more than a target. A policy solved for success within C
spends all of C, since an unspent intervention is worth nothing, including interventions that
gain less than an average one; priced down to spend C - 1/2 it keeps only the better ones, a point
between the budgets on the helper's efficient frontier (success against interventions spent).
"""

from __future__ import annotations

import numpy as np

from ..estimate import TabularModel
from ..solution import Solution
from .exact import solve_exact
from .lagrangian import greedy_policy


def advice_price(advice_cost: float, objective: str, horizon: int) -> float:
    """lambda for advice cost c: c / horizon when success is the mean over the episode's
    questions (``success``), c when the return is the summed per-question reward (``reward``)."""
    if not (np.isfinite(advice_cost) and advice_cost >= 0):
        raise ValueError(f"advice_cost={advice_cost!r}: give a finite cost >= 0 per piece of advice, e.g. 0.3")
    return float(advice_cost) / max(int(horizon), 1) if objective == "success" else float(advice_cost)


def solve_priced(model: TabularModel, price: float) -> Solution:
    """Optimal deterministic policy for (return - ``price`` per intervention), no budget."""
    if not (np.isfinite(price) and price >= 0):
        raise ValueError(f"price={price!r}: the price of an intervention must be a finite number >= 0")
    T, S = model.horizon, model.n_states
    act = greedy_policy(model, price)[..., 0]
    policy = np.zeros((T, S, T + 1))
    policy[:, :, 1:] = act[:, :, None]
    return Solution.evaluated(model, "priced", T, policy, hard_budget=True, lam=float(price))


def solve_spending(model: TabularModel, budget: int, target: float, *, iterations: int = 32) -> Solution:
    """The hard-budget policy at the lowest price whose expected interventions are <= ``target``.

    Expected interventions fall as the price rises (each priced solve is optimal for its price),
    so bisection on the price finds it; a target at or above the unpriced spend is price 0. The policy changes only
    at finitely many prices, and 32 halvings leave a bracket of 2^-32 of the price range: on the kept rapids rows
    (4 seeds, 3 / 6 / 12 bins, 12 targets) every policy equals the one 60 halvings find, at half the solves.
    """
    if not (np.isfinite(target) and target >= 0):
        raise ValueError(f"target={target!r}: give the expected interventions to spend, a number >= 0")
    unpriced = solve_exact(model, budget)
    if unpriced.expected_interventions <= target:
        return unpriced
    # No intervention gains more than the reward span over the remaining steps.
    low, high = 0.0, float(model.rewards.max() - model.rewards.min()) * model.horizon + 1.0
    best = solve_exact(model, budget, high)
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        solution = solve_exact(model, budget, middle)
        if solution.expected_interventions > target:
            low = middle
        else:
            high, best = middle, solution
    return best
