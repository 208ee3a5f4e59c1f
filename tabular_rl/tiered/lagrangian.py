"""Lagrangian tiered solve: one multiplier on cost, bisected until the spend meets a target in expectation.

For large tables the resource state is what makes the exact solve dear (budget units times each
capped kind's calls). Here it leaves the solve: for a multiplier ``lam`` (return per unit of price)
backward induction over (step, state) alone ranks the actions by

    Q_lam[t, s, a] = r(t, s, a) - lam * price(a) + sum_s' P(s' | t, s, a) V_lam[t + 1, s']

The budget-free table (the best action by Q_lam) spends less as ``lam`` rises; bisection finds the
multiplier at which it spends ``target`` per episode in expectation (the relaxation that
``tabular_rl.solvers.lagrangian`` solves for one kind). What is played is guarded: at (step, state,
resource state) the best-ranked action it can afford there (the agent's own action always can), so
the budget and the caps hold in every episode, by construction. The guard can move later decisions
and so the spend; where the guarded table at the multiplier below the breakpoint spends past the
target, it is played for a whole episode with probability ``mix`` beside one that does not, which
spends the target exactly. Each table is a feasible policy under the hard budget and caps, so the
value is at most the exact solve's. (Bisecting on the guarded spend instead would not work with the
default target, the budget: a guarded table never spends more than the budget, so every multiplier,
0 included, would meet it, and 0 calls the dearest useful help until the budget runs out.)
"""

from __future__ import annotations

import numpy as np

from .evaluate import evaluate_table
from .exact import best_action, preference_order
from .mdp import TieredModel
from .resources import Resources
from .solution import TieredSolution


def lagrangian_tables(model: TieredModel, resources: Resources, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(T, S) the budget-free best action at multiplier ``lam``, and (T, S, R) the best affordable one there."""
    T, S = model.horizon, model.n_states
    affordable = resources.next_index() >= 0  # (A, R)
    order = preference_order(resources)
    priced = model.rewards - lam * resources.cost() / resources.scale
    free = np.zeros((T, S), dtype=np.int64)
    guarded = np.zeros((T, S, resources.size), dtype=np.int64)
    v_next = np.zeros(S)
    for t in range(T - 1, -1, -1):
        q = priced[t] + model.transitions[t, :, :, :S] @ v_next  # (S, A)
        free[t], v_next = best_action(q, order)
        guarded[t], _ = best_action(np.where(affordable[None], q[:, :, None], -np.inf), order)
    return free, guarded


def budget_free_cost(model: TieredModel, resources: Resources, free: np.ndarray) -> float:
    """Expected spend of a (T, S) table played with no budget or caps (the relaxation the multiplier prices)."""
    S = model.n_states
    cost = resources.cost() / resources.scale
    d, spent = model.start.copy(), 0.0
    for t in range(model.horizon):
        spent += float(d @ cost[free[t]])
        p = model.transitions[t, np.arange(S), free[t], :S]  # (S, S) under each state's own action
        d = d @ p
    return spent


def solve_tiered_lagrangian(model: TieredModel, resources: Resources, target: float | None = None,
                            max_iter: int = 100) -> TieredSolution:
    """Guarded tables at the multiplier whose budget-free spend meets ``target`` (default: the budget); two of
    them mixed where the guarded spend would pass the target (module docstring)."""
    target = resources.budget / resources.scale if target is None else float(target)
    if not (np.isfinite(target) and target >= 0):
        raise ValueError(f"target={target!r}: give the expected spend per episode, a number >= 0")

    def spend(lam):
        return budget_free_cost(model, resources, lagrangian_tables(model, resources, lam)[0])

    def guarded(lam):
        table = lagrangian_tables(model, resources, lam)[1]
        return table, evaluate_table(model, resources, table).expected_cost

    # No call gains more than the reward span over the horizon, so past that per unit of the lowest
    # nonzero price no paid call is taken (a free kind costs nothing, whatever it does).
    cost = resources.cost() / resources.scale
    span = float(model.rewards.max() - model.rewards.min())
    ceiling = (span * model.horizon + 1.0) / cost[cost > 0].min() if (cost > 0).any() else 0.0
    lo, hi = 0.0, ceiling
    if spend(lo) > target:
        for _ in range(max_iter):  # budget-free spend falls as the multiplier rises
            mid = 0.5 * (lo + hi)
            if hi - lo <= 1e-12 * (1.0 + hi):
                break
            lo, hi = (mid, hi) if spend(mid) > target else (lo, mid)
    else:
        hi = lo
    # Played with the guard, the lower multiplier's table can still spend past the target in expectation (the
    # guard moves later decisions): then raise the multiplier until the guarded spend meets it, and mix.
    table_lo, cost_lo = guarded(lo)
    if cost_lo <= target:
        return TieredSolution.evaluated(model, resources, "lagrangian", (table_lo,), lam=lo)
    table_hi, cost_hi = guarded(hi)
    while cost_hi > target and hi < ceiling:
        lo, table_lo, cost_lo = hi, table_hi, cost_hi
        hi = min(ceiling, 2.0 * hi + 1e-9)
        table_hi, cost_hi = guarded(hi)
    mix = (target - cost_hi) / (cost_lo - cost_hi)
    return TieredSolution.evaluated(model, resources, "lagrangian", (table_lo, table_hi), mix=mix, lam=hi)
