"""Optimal kinds for logged decision points: which help the solved tiered helper would call at each row.

The label of a row is ``TieredSolution.kind`` at the row's (step, state, resource state), written as the kind's
name, "" where the agent acts (a string column: distill learns K + 1 classes from it):

* the state comes from the solution's discretizer (the row's ``prm_score`` and ``step``);
* the resource state is the one the helper would hold had it made the episode's logged calls: the budget less
  the prices of the calls logged at earlier steps, and each capped kind's cap less its earlier calls (read
  from ``help_kind``, priced at the solve's prices, not the logged ``help_cost``, so the label and the table
  agree on what a call costs). A row whose logged calls already spent more than the budget holds 0 and is
  labelled with the agent, as a one-kind row with no budget left is labelled base (``tabular_rl.label``);
* a Lagrangian mixture is labelled by the table it plays more often (``tables[0]`` where ``mix >= 0.5``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..transitions import DEFAULT_COLUMNS, Columns
from .estimate import KIND_COLUMN, help_kind_actions
from .solution import TieredSolution


def resource_states(df: pl.DataFrame, solution: TieredSolution, columns: Columns = DEFAULT_COLUMNS,
                    kind_column: str = KIND_COLUMN) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Per row, (budget left in cost units, {capped kind index: calls left}) before its decision."""
    res = solution.resources
    actions = help_kind_actions(df, solution.kinds, kind_column, columns.action)
    order = np.lexsort((df[columns.step].to_numpy(), df[columns.episode].cast(pl.String).to_numpy()))
    episode = df[columns.episode].cast(pl.String).to_numpy()[order]
    first = np.r_[True, episode[1:] != episode[:-1]]
    group = np.cumsum(first) - 1

    def before(values: np.ndarray) -> np.ndarray:
        """Sum of ``values`` over the episode's earlier rows, in the frame's row order."""
        total = np.cumsum(values[order])
        starts = np.flatnonzero(first)
        spent_sorted = total - values[order] - np.r_[0, total][starts][group]
        out = np.empty_like(spent_sorted)
        out[order] = spent_sorted
        return out

    spent = before(res.cost()[actions].astype(np.int64))
    calls = {k: res.caps[k - 1] - before((actions == k).astype(np.int64)) for k in res.capped}
    return np.maximum(res.budget - spent, 0), {k: np.maximum(c, 0) for k, c in calls.items()}


def label_tiered(df: pl.DataFrame, solutions: list[TieredSolution], discretizer, *, columns: Columns = DEFAULT_COLUMNS,
                 column: str = "optimal_kind") -> pl.DataFrame:
    """``df`` with one string column ``{column}_c{budget}`` per solution (budget in the user's unit of price:
    the kind's name, "" for the agent), the rows' states from ``discretizer`` (the one the solutions were solved on)."""
    step = df[columns.step].cast(pl.Int64).to_numpy()
    states = discretizer.transform(df[columns.score].cast(pl.Float64).to_numpy(), step)
    out = []
    for sol in solutions:
        left, calls = resource_states(df, sol, columns)
        actions = sol.tables[0 if sol.mix >= 0.5 else 1][np.clip(step, 0, sol.horizon - 1), states,
                                                         sol.resources.index(left, calls)]
        names = np.array(["", *sol.kinds], dtype=object)[actions]
        out.append(pl.Series(f"{column}_c{budget_name(sol)}", names.tolist(), dtype=pl.String))
    return df.with_columns(out)


def budget_name(solution: TieredSolution) -> str:
    """The budget as a file and column name writes it: ``6`` for 6.0, ``2.5`` for 2.5."""
    return f"{solution.resources.budget / solution.resources.scale:g}"
