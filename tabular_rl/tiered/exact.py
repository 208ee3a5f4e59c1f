"""Exact tiered solve: backward induction over (step, state, resource state).

With ``Resources`` r = (budget left in cost units, calls left of each capped kind) and ``next(a, r)``
the resource state after action a (undefined where a is not affordable):

    V[T, s, r]    = 0
    Q[t, s, a, r] = r(t, s, a) - lam * price(a) + sum_s' P(s' | t, s, a) V[t + 1, s', next(a, r)]
    V[t, s, r]    = max over affordable a of Q[t, s, a, r]

so the table never takes an action it cannot afford, and no episode exceeds a cap or the budget.
Ties go to the cheaper action (the agent first), as ``solve_exact`` gives a tie to the agent: help
that gains nothing keeps the budget. ``lam`` (0 by default) charges that much return per unit of
price (the user's unit) on top of the budget: the best table that calls help only where it gains
more than its price. With one kind at price 1 this is ``solve_exact``.
"""

from __future__ import annotations

import numpy as np

from ..solvers.exact import TIE_TOL
from .mdp import TieredModel
from .resources import Resources
from .solution import TieredSolution


def preference_order(resources: Resources) -> np.ndarray:
    """Actions from the cheapest (the agent) to the dearest; an action must beat every cheaper one to be taken."""
    return np.argsort(resources.cost(), kind="stable")


def best_action(q: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(action, value) per entry of ``q`` (action on axis 1): the cheapest action within ``TIE_TOL`` of the best."""
    best_a = np.full(q[:, 0].shape, order[0], dtype=np.int64)
    best_q = q[:, order[0]].copy()
    for a in order[1:]:
        wins = q[:, a] > best_q + TIE_TOL * (1.0 + np.abs(best_q))
        best_a[wins], best_q[wins] = a, q[:, a][wins]
    return best_a, best_q


def solve_tiered_exact(model: TieredModel, resources: Resources, lam: float = 0.0) -> TieredSolution:
    """Optimal deterministic table under ``resources`` (hard budget and caps), each cost unit priced ``lam``."""
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam={lam!r}: the price multiplier must be a finite number >= 0")
    if resources.n_kinds != model.n_kinds:
        raise ValueError(f"{resources.n_kinds} price(s) for a model of {model.n_kinds} kind(s) of help")
    T, S, A, R = model.horizon, model.n_states, model.n_kinds + 1, resources.size
    nxt = resources.next_index()
    affordable = nxt >= 0
    order = preference_order(resources)
    priced = model.rewards - lam * resources.cost() / resources.scale
    table = np.zeros((T, S, R), dtype=np.int64)
    values = np.zeros((T, S, R))
    v_next = np.zeros((S, R))
    for t in range(T - 1, -1, -1):
        cont = model.transitions[t, :, :, :S] @ v_next  # (S, A, R), resources not yet spent
        q = np.full((S, A, R), -np.inf)
        for a in range(A):
            q[:, a, affordable[a]] = priced[t, :, a, None] + cont[:, a, nxt[a, affordable[a]]]
        table[t], v_next = best_action(q, order)
        values[t] = v_next
    unpriced = values if lam == 0 else None  # priced values are not the policy's return
    return TieredSolution.evaluated(model, resources, "exact", (table,), values=unpriced,
                                    lam=float(lam) if lam else None)
