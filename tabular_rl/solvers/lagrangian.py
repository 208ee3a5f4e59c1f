"""Lagrangian solver: price each intervention at lambda, find the price that spends the budget.

For a price ``lam`` the helper solves the unconstrained MDP with reward ``r - lam * a`` by
backward induction over (step, state); its expected interventions ``g(lam)`` from the start
distribution fall as ``lam`` rises. Bisection finds neighbouring prices ``lo < hi`` with
``g(lo) > C >= g(hi)``; running the ``lo`` policy for a whole episode with probability ``mix``
(else the ``hi`` policy) spends exactly ``C`` in expectation and is optimal for the constrained
MDP with the budget in expectation (the same optimum as ``solve_lp``).

``Solution.policy`` holds the per-step stochastic policy with the same occupancy as that mixture
(so ``label`` and evaluation work on one table); the pair and ``mix`` are kept as well.
"""

from __future__ import annotations

import numpy as np

from ..estimate import TabularModel
from ..evaluate import Evaluation, evaluate, policy_values, q_values
from ..solution import Solution
from .exact import prefer_intervene


def greedy_policy(model: TabularModel, lam: float) -> np.ndarray:
    """(T, S, 1) optimal deterministic policy for reward r - lam * intervened (ties -> base)."""
    T, S = model.horizon, model.n_states
    policy = np.zeros((T, S, 1))
    v_next = np.zeros((S, 1))
    for t in range(T - 1, -1, -1):
        q0, q1 = q_values(model, t, v_next, hard_budget=False)
        act = prefer_intervene(q0, q1 - lam)
        policy[t] = act
        v_next = np.where(act, q1 - lam, q0)
    return policy


def _mixed(ev_more: Evaluation, ev_fewer: Evaluation, w: float, attr: str) -> float:
    return w * getattr(ev_more, attr) + (1 - w) * getattr(ev_fewer, attr)


def solve_lagrangian(model: TabularModel, budget: int, *, max_iter: int = 200) -> Solution:
    """Mixture of two deterministic policies meeting ``budget`` interventions in expectation."""
    if int(budget) < 0:
        raise ValueError(f"budget={budget}: the intervention budget must be >= 0")
    budget = int(budget)

    def run(lam):
        pol = greedy_policy(model, lam)
        return pol, evaluate(model, pol, budget, hard_budget=False)

    lo, (pol_lo, ev_lo) = 0.0, run(0.0)
    if ev_lo.expected_interventions <= budget:
        hi, pol_hi, ev_hi = lo, pol_lo, ev_lo
    else:
        # No state gains more than span * T from intervening, so this price stops every intervention.
        span = float(model.rewards.max() - model.rewards.min())
        hi = span * model.horizon + 1.0
        pol_hi, ev_hi = run(hi)
        while ev_hi.expected_interventions > budget:  # float safety; the bound above should hold
            hi *= 2
            pol_hi, ev_hi = run(hi)
        for _ in range(max_iter):
            if hi - lo <= 1e-13 * (1.0 + hi):
                break  # one breakpoint left between the two prices
            mid = 0.5 * (lo + hi)
            pol, ev = run(mid)
            if ev.expected_interventions > budget:
                lo, pol_lo, ev_lo = mid, pol, ev
            else:
                hi, pol_hi, ev_hi = mid, pol, ev
    g_more, g_fewer = ev_lo.expected_interventions, ev_hi.expected_interventions
    w = 1.0 if g_more <= budget else (budget - g_fewer) / (g_more - g_fewer)

    # Per-step policy with the mixture's occupancy: pi(1 | t, s) = x(t, s, 1) / x(t, s).
    occ = w * ev_lo.occupancy + (1 - w) * ev_hi.occupancy
    reach = occ.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        policy = np.where(reach > 0, occ[..., 1] / reach, pol_hi)
    return Solution(
        method="lagrangian",
        budget=budget,
        policy=policy,
        values=policy_values(model, policy, hard_budget=False),
        hard_budget=False,
        expected_return=_mixed(ev_lo, ev_hi, w, "expected_return"),
        expected_success=_mixed(ev_lo, ev_hi, w, "expected_success"),
        expected_interventions=_mixed(ev_lo, ev_hi, w, "expected_interventions"),
        discretizer=model.discretizer,
        lam=0.5 * (lo + hi),
        policies=(pol_lo[..., 0], pol_hi[..., 0]),
        mix=float(w),
    )
