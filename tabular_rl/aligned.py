"""Episodes aligned at their ends: a table's step counted back from each episode's own horizon.

    to = longest_if_they_differ(rows)              # None where every episode has one horizon
    rows = align(rows, to)                         # step + to - horizon
    discretizer.aligned_to = to                    # the gate shifts the observation's step the same way

Where episodes have different horizons (TextWorld ends a game after 3 x quest length + 5 moves: 14 to 29), step t is
the last move of one game and the middle of another. A table over (step, score) then reads the shorter games'
deadlines as a property of the step: on TextWorld it kept the budget for steps 13, 16, 19, ... (the shorter games'
last moves) and helped there, too late for most games (benchmarks/RESULTS.md, TextWorld on a GPU). Counting each
episode's steps back from its own end (step + H - horizon, H the longest horizon) puts every deadline on one step;
an episode with a shorter horizon enters the table later (``TabularModel.entries``). Nothing else changes: an
episode that ends early (a win, a slip) still ends where it ends. Where no episode ends before its horizon, the
horizon is the task's own length rather than a deadline, and steps stay counted from the start (on the arithmetic
chain of 3 to 5 operations, counted from the end, the verifier the training folds chose changed for the worse).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .columns import DEFAULT_COLUMNS, Columns

TIME_AXES = ("start", "end")
"""Where a solve counts an episode's steps from: its start (the default) or its end."""
COLUMN = "horizon"
"""The rows' column holding each episode's horizon (decision points it may have)."""


def longest_if_they_differ(rows: pl.DataFrame, columns: Columns = DEFAULT_COLUMNS) -> int | None:
    """The longest horizon where the rows' episodes have more than one and the horizon is a limit (some episode ends
    before it: a win, a slip), else None. Rows with one horizon, none logged, or episodes that all run exactly to
    their horizon (a task's own length, as a chain of 3 to 5 operations: no deadline to meet) keep their steps."""
    if COLUMN not in rows.columns or rows.height == 0 or rows[COLUMN].null_count():
        return None
    horizon = rows[COLUMN].cast(pl.Int64)
    if horizon.n_unique() < 2 or bool((rows[columns.step].cast(pl.Int64) >= horizon).any()):
        return None
    last = rows.group_by(columns.episode).agg(pl.col(columns.step).max(), pl.col(COLUMN).first())
    if not bool((last[columns.step] < last[COLUMN] - 1).any()):
        return None
    return int(horizon.max())


def aligned(step, horizon, to: int | None) -> np.ndarray:
    """``step`` counted from the end: ``step + to - horizon`` (never below 0; an unknown horizon counts as ``to``), or
    ``step`` where ``to`` is None."""
    step = np.asarray(step, dtype=np.int64)
    if to is None:
        return step
    horizon = np.asarray(horizon)
    if horizon.dtype == object:  # an observation without a horizon
        horizon = np.where(horizon == None, to, horizon)  # noqa: E711 (elementwise)
    return np.maximum(step + int(to) - horizon.astype(np.int64), 0)


def align(rows: pl.DataFrame, to: int | None, columns: Columns = DEFAULT_COLUMNS) -> pl.DataFrame:
    """``rows`` with each step counted from its episode's end (``aligned``); unchanged where ``to`` is None."""
    if to is None:
        return rows
    step = aligned(rows[columns.step].to_numpy(), rows[COLUMN].to_numpy(), to)
    return rows.with_columns(pl.Series(columns.step, step, dtype=rows.schema[columns.step]))
