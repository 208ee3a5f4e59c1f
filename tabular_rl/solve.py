"""One entry point for the three budgeted solvers."""

from __future__ import annotations

import dataclasses

from .estimate import TabularModel
from .pessimism import pessimistic
from .solution import Solution
from .solve_exact import solve_exact
from .solve_lagrangian import solve_lagrangian
from .solve_lp import solve_lp

SOLVERS = {"exact": solve_exact, "lagrangian": solve_lagrangian, "lp": solve_lp}


def solve(model: TabularModel, budget: int, method: str = "exact", pessimism: float = 0.0) -> Solution:
    """Best helper under ``budget`` interventions per episode.

    ``exact``: hard budget (never exceeded), deterministic, budget-left aware.
    ``lagrangian``: budget in expectation, mixture of two deterministic policies.
    ``lp``: budget in expectation, occupancy-measure linear program (HiGHS).

    ``pessimism`` z > 0 solves the model whose rewards are lowered by z standard errors of their
    estimates (``tabular_rl.pessimism``) and reports the policy's success, return and
    interventions on ``model`` itself.
    """
    if method not in SOLVERS:
        raise ValueError(f"method={method!r}: choose one of {', '.join(SOLVERS)}")
    solution = SOLVERS[method](pessimistic(model, pessimism), budget)
    if not pessimism:
        return solution
    on_model = Solution.evaluated(model, solution.method, budget, solution.policy, solution.hard_budget)
    return dataclasses.replace(
        solution, values=on_model.values, expected_return=on_model.expected_return,
        expected_success=on_model.expected_success, expected_interventions=on_model.expected_interventions)
