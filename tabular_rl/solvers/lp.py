"""Constrained-MDP linear program over occupancy measures (budget in expectation).

Variables ``x[t, s, a] >= 0``: probability of being in state ``s`` at step ``t`` and taking ``a``.

    maximise   sum r(t, s, a) x[t, s, a]
    subject to sum_a x[0, s, a]  = start(s)
               sum_a x[t, s', a] = sum_{s, a} P(s' | t - 1, s, a) x[t - 1, s, a]     (t >= 1)
               sum_{t, s} x[t, s, 1] <= C

solved with ``scipy.optimize.linprog(method="highs")``. Ties go to ``base``: among the occupancies
with the optimal return (to a relative ``LP_TIE_TOL``) a second LP takes the one with the fewest
interventions, so an intervention that gains nothing is never part of the answer (the first LP
alone may put occupancy there whenever the budget is slack). The policy is ``x[t, s, 1] / x[t, s]``;
where a state is never reached (``x[t, s] = 0``) the LP says nothing, so the policy there is the
greedy one at the budget constraint's shadow price (the LP dual), as in the Lagrangian solver.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from ..estimate import TabularModel
from ..solution import Solution
from .lagrangian import greedy_policy

# Below this a state's occupancy is solver noise, not a visit.
REACH_EPS = 1e-12
# Relative return the second pass may give up: HiGHS meets its constraints to about 1e-10, so a
# gain below this is a tie to the LP.
LP_TIE_TOL = 1e-9


def occupancy_lp(model: TabularModel, budget: int) -> tuple[np.ndarray, float]:
    """Optimal occupancy ``x`` (T, S, 2) and the budget's shadow price (lambda >= 0)."""
    T, S = model.horizon, model.n_states
    n = T * S * 2
    var = np.arange(n)
    # Outflow: every x[t, s, a] appears with +1 in the row of (t, s).
    rows, cols, vals = [var // 2], [var], [np.ones(n)]
    # Inflow: -P(s' | t - 1, s, a) x[t - 1, s, a] in the row of (t, s'), for t >= 1.
    if T > 1:
        p = model.transitions[:-1, :, :, :S]
        t, s, a, s2 = np.nonzero(p)
        rows.append((t + 1) * S + s2)
        cols.append((t * S + s) * 2 + a)
        vals.append(-p[t, s, a, s2])
    a_eq = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(T * S, n))
    b_eq = np.zeros(T * S)
    if model.entries is not None:
        raise ValueError("this model's episodes enter past step 0 (aligned at their ends); use solve_exact / evaluate")
    b_eq[:S] = model.start
    a_ub = sparse.csr_matrix((var % 2).astype(float)[None, :])
    options = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    res = linprog(-model.rewards.ravel(), A_ub=a_ub, b_ub=[float(budget)], A_eq=a_eq, b_eq=b_eq, bounds=(0, None),
                  method="highs", options=options)
    if res.status != 0:
        raise RuntimeError(f"linprog (highs) failed for budget={budget}: {res.message}")
    lam = float(-res.ineqlin.marginals[0])
    # Second pass: the fewest interventions that keep the optimal return.
    best = -float(res.fun)
    keep = sparse.vstack([a_ub, sparse.csr_matrix(-model.rewards.ravel()[None, :])]).tocsr()
    fewest = linprog((var % 2).astype(float), A_ub=keep, b_ub=[float(budget), -(best - LP_TIE_TOL * (1.0 + abs(best)))],
                     A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs", options=options)
    x = fewest.x if fewest.status == 0 else res.x
    return np.clip(x, 0.0, None).reshape(T, S, 2), lam


def solve_lp(model: TabularModel, budget: int) -> Solution:
    """Optimal (possibly stochastic) policy with at most ``budget`` interventions in expectation."""
    if int(budget) < 0:
        raise ValueError(f"budget={budget}: the intervention budget must be >= 0")
    budget = int(budget)
    x, lam = occupancy_lp(model, budget)
    reach = x.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.clip(x[..., 1] / reach, 0.0, 1.0)
    fallback = greedy_policy(model, lam)[..., 0]
    policy = np.where(reach > REACH_EPS, share, fallback)[..., None]
    return Solution.evaluated(model, "lp", budget, policy, hard_budget=False, lam=lam)
