"""Optimal labels for logged decision points: what the solved helper would do at each row.

The label of a row is ``Solution.intervene_prob(step, state, budget_left) > 0.5``:

* the row's state comes from the solution's discretizer (its ``prm_score`` and ``step``);
* ``budget_left`` above the solved budget C is clipped to C (a helper given C never holds
  more), and a row with no budget left is always labelled base (intervening is impossible);
* steps beyond the solved horizon use the last step;
* for a budget-in-expectation solution (lagrangian, lp) the policy can be stochastic at a few
  states; the label is its more likely action (an exact 0.5 goes to base).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from .solution import Solution
from .transitions import DEFAULT_COLUMNS, Columns


def label(
    df: pl.DataFrame,
    solution: Solution | Sequence[Solution],
    *,
    columns: Columns = DEFAULT_COLUMNS,
    column: str = "optimal_intervene",
    states: np.ndarray | None = None,
) -> pl.DataFrame:
    """``df`` with a boolean ``column`` added (one ``{column}_c{budget}`` per solution if several).

    ``states`` (one state id per row) skips discretization; otherwise the solution's discretizer
    is applied to ``columns.score`` and ``columns.step``.
    """
    many = not isinstance(solution, Solution)
    sols = list(solution) if many else [solution]
    if not sols:
        raise ValueError("label needs at least one Solution")
    names = [f"{column}_c{s.budget}" for s in sols] if many else [column]
    if len(set(names)) != len(names):
        raise ValueError(f"two solutions share a budget ({names}); label them in separate calls with their own column")
    for c in (columns.step, columns.budget_left) + (() if states is not None else (columns.score,)):
        if c not in df.columns:
            raise ValueError(f"dataset is missing column {c!r} needed for labels; it has {df.columns}")
    step = df[columns.step].cast(pl.Int64).to_numpy()
    budget_left = df[columns.budget_left].cast(pl.Int64).to_numpy()
    if states is None:
        disc = sols[0].discretizer
        if disc is None:
            raise ValueError("solution has no discretizer (model built from tables): pass states= explicitly")
        if any(s.discretizer is None or s.discretizer.to_dict() != disc.to_dict() for s in sols[1:]):
            raise ValueError("solutions come from different discretizers; label them in separate calls")
        states = disc.transform(df[columns.score].cast(pl.Float64).to_numpy(), step)
    states = np.asarray(states, dtype=np.int64)
    if states.shape != step.shape:
        raise ValueError(f"states has {states.shape[0]} entries for {step.shape[0]} rows")
    cells: dict[tuple[int, int], np.ndarray] = {}  # shared by solutions of the same shape
    labels = []
    for name, sol in zip(names, sols):
        key = (sol.horizon, sol.n_states)
        if key not in cells:
            cells[key] = sol.cells(step, states)
        labels.append(pl.Series(name, sol.lookup(sol.policy > 0.5, cells[key], budget_left)))
    return df.with_columns(labels)
