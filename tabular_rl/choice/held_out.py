"""The solved policy's value on logged episodes it was not fitted on: cross-validation of a whole solve.

    values = held_out_values(df, folds, budgets=[1, 2, 3], bins=6, binning="supervised", targets=own)

For each fold ``k`` the discretizer is fitted, the model estimated and the budgeted problem solved on
the rows of the other folds, exactly as ``helpgate solve`` does on all of them; a second model is
then estimated on fold ``k``'s rows alone (same discretizer) and the fold-``k`` policy is evaluated in
it exactly (``tabular_rl.evaluate``). The figure is the policy's expected success in the held-out
fold's own model, averaged over the folds: the solve's optimism about its own data is gone, and a
discretization that merges states the policy should tell apart pays for it in that value.

Its assumption: the held-out model is a fair judge of a policy over the discretized state, which holds
where what the state leaves out does not depend on the past actions (plain-cue's risks are drawn
afresh at every crossing); where it does, the figure is a model-based estimate, not a measurement. One such case
the judge does see: an episode that carries a failed step to its end (``tabular_rl.choice.carried``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..discretize import Discretizer
from ..estimate import MissingActionError, estimate
from ..evaluate import evaluate
from .carried import CarriedFailure
from .judge import JUDGE_SMOOTHING, grid_of, judge_model, judged, shrink_toward
from ..solvers.solve import solve
from ..transitions import DEFAULT_COLUMNS, Columns


def held_out_values(df: pl.DataFrame, folds: np.ndarray, budgets: list[int], bins: int, binning: str,
                    targets: np.ndarray | None = None, *, columns: Columns = DEFAULT_COLUMNS,
                    smoothing: float = 1.0, backoff: float | str = "auto", pessimism: float = 0.0) -> dict[int, float]:
    """Per budget, the mean over folds of the held-out expected success of the policy solved without that fold
    (module docstring). ``folds``: one fold id per row of ``df`` (an episode's rows share one); ``targets``: one
    outcome per row for ``supervised`` binning. A fold whose own rows lack an action is skipped."""
    folds = np.asarray(folds)
    if folds.shape != (df.height,):
        raise ValueError(f"folds: {folds.size} fold ids for {df.height} rows; give one per row")
    per_budget: dict[int, list[float]] = {int(c): [] for c in budgets}
    for k in np.unique(folds):
        inside = folds != k
        fit_rows, held_rows = df.filter(pl.Series(inside)), df.filter(pl.Series(~inside))
        disc = Discretizer(bins, binning).fit(
            fit_rows[columns.score], fit_rows[columns.step], None if targets is None else np.asarray(targets)[inside])
        try:
            fitted = estimate(fit_rows, disc, columns=columns, smoothing=smoothing, backoff=backoff, objective="success")
            judge = shrink_toward(estimate(held_rows, disc, columns=columns, smoothing=JUDGE_SMOOTHING, backoff=0.0,
                                    objective="success"), fitted)
        except MissingActionError:
            continue
        carried = CarriedFailure.of(held_rows, fit_rows, columns=columns)
        if carried:  # the judge also knows whether an earlier step failed (tabular_rl.choice.carried)
            cells = grid_of([disc.edges_])
            grid = carried.grid(cells)
            try:
                carried_judge = judge_model(carried.rows(held_rows, cells), carried.rows(fit_rows, cells), grid,
                                            columns=columns, smoothing=smoothing, backoff=backoff,
                                            objective="success")
            except MissingActionError:
                continue
        for c in per_budget:
            policy = solve(fitted, c, "exact", pessimism).policy
            if carried:
                decide = carried.decide(_table_decide(policy, disc), cells)
                per_budget[c].append(judged(carried_judge, grid, decide, c)[0])
                continue
            T = min(policy.shape[0], judge.horizon)
            if T < judge.horizon:  # the held-out fold is longer: the policy acts (never intervenes) past its horizon
                policy = np.concatenate([policy, np.zeros((judge.horizon - T, *policy.shape[1:]))])
            per_budget[c].append(float(evaluate(judge, policy[:judge.horizon], c, hard_budget=True).expected_success))
    return {c: float(np.mean(v)) if v else float("nan") for c, v in per_budget.items()}


def _table_decide(policy: np.ndarray, disc: Discretizer):
    """``decide(step, score, budget_left)`` of a solved table over ``disc``'s states (never past its horizon)."""
    def decide(step, score, budget_left):
        step, budget_left = np.asarray(step), np.asarray(budget_left)
        inside = step < policy.shape[0]
        t = np.minimum(step, policy.shape[0] - 1)
        state = disc.transform(np.asarray(score, dtype=np.float64), t)
        return policy[t, state, np.minimum(budget_left, policy.shape[2] - 1)] * inside

    return decide
