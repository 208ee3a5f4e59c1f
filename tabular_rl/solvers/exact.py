"""Exact solver for a hard budget: backward induction over (step, state, budget left).

The budget left is part of the state, so a policy from here never spends more than ``budget``
interventions in any episode: intervening is unavailable at ``b = 0`` and moves ``b`` to ``b - 1``.

    V[T, s, b]  = 0
    Q0[t, s, b] = r(t, s, 0) + sum_s' P(s' | t, s, 0) V[t + 1, s', b]
    Q1[t, s, b] = r(t, s, 1) + sum_s' P(s' | t, s, 1) V[t + 1, s', b - 1]      (b >= 1)
    V[t, s, b]  = max(Q0, Q1)

Ties go to ``base``: an intervention that gains nothing keeps the budget for later. With a
``price`` each intervention also costs that much return (``Q1 - price``): the best policy under the
budget that spends an intervention only where it gains more than its price.
With ``pessimism`` z an intervention is also left out where its own gain (intervening against
giving the intervention up) does not clear z standard errors of its estimate (``tabular_rl.solvers.pessimism``).
Each step is one batched matrix product over all states and budget levels.
"""

from __future__ import annotations

import numpy as np

from ..estimate import TabularModel
from ..evaluate import q_values
from ..solution import Solution
from .pessimism import check_pessimism, gain_standard_error

# Relative margin an intervention must win by; below it the two actions are a tie (float noise).
TIE_TOL = 1e-12


def prefer_intervene(q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    return q1 > q0 + TIE_TOL * (1.0 + np.abs(q0))


def solve_exact(model: TabularModel, budget: int, price: float = 0.0, pessimism: float = 0.0) -> Solution:
    """Optimal deterministic policy under at most ``budget`` interventions per episode, each
    intervention priced at ``price`` (the solution reports the unpriced return and success), none
    taken where its own gain is within ``pessimism`` standard errors of nothing."""
    if int(budget) < 0:
        raise ValueError(f"budget={budget}: the intervention budget must be >= 0")
    if not (np.isfinite(price) and price >= 0):
        raise ValueError(f"price={price!r}: the price of an intervention must be a finite number >= 0")
    budget, pessimism = int(budget), check_pessimism(pessimism)
    se = gain_standard_error(model) if pessimism else None
    T, S, B = model.horizon, model.n_states, budget + 1
    policy = np.zeros((T, S, B))
    values = np.zeros((T, S, B))
    v_next = np.zeros((S, B))
    for t in range(T - 1, -1, -1):
        q0, q1 = q_values(model, t, v_next, hard_budget=True)
        q1 = q1 - price
        act = prefer_intervene(q0, q1)
        if pessimism:  # intervening now against giving the intervention up: b - 1 left after both
            act[:, 1:] &= q1[:, 1:] - q0[:, :-1] > pessimism * se[t][:, None]
        policy[t] = act
        v_next = values[t] = np.where(act, q1, q0)
    if price:  # the tables hold priced values: evaluate the policy on the unpriced model
        return Solution.evaluated(model, "exact", budget, policy, hard_budget=True, lam=float(price))
    return Solution.evaluated(model, "exact", budget, policy, hard_budget=True, values=values)
