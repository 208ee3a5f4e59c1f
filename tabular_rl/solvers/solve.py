"""One entry point for the three budgeted solvers."""

from __future__ import annotations

from ..estimate import TabularModel
from ..solution import Solution
from .exact import solve_exact
from .lagrangian import solve_lagrangian
from .lp import solve_lp

SOLVERS = {"exact": solve_exact, "lagrangian": solve_lagrangian, "lp": solve_lp}


def solve(model: TabularModel, budget: int, method: str = "exact", pessimism: float = 0.0) -> Solution:
    """Best helper under ``budget`` interventions per episode.

    ``exact``: hard budget (never exceeded), deterministic, budget-left aware.
    ``lagrangian``: budget in expectation, mixture of two deterministic policies.
    ``lp``: budget in expectation, occupancy-measure linear program (HiGHS).

    ``pessimism`` z > 0 (``exact`` only): no intervention where its own gain is within z standard
    errors of nothing (``tabular_rl.solvers.pessimism``).
    """
    if method not in SOLVERS:
        raise ValueError(f"method={method!r}: choose one of {', '.join(SOLVERS)}")
    if pessimism:
        if method != "exact":
            raise ValueError(f"pessimism={pessimism}: compares intervening with giving the intervention up, which "
                             "needs the budget left (method exact); drop --pessimism or use --method exact.")
        return solve_exact(model, budget, pessimism=pessimism)
    return SOLVERS[method](model, budget)
