"""The judge's memory of a failure the episode carries to its end without ending there.

    carried = CarriedFailure.of(held_rows, fit_rows)          # None where no failure is carried
    if carried:
        model = judge_model(carried.rows(held_rows, grid), carried.rows(fit_rows, grid), carried.grid(grid))
        success, spent = judged(model, carried.grid(grid), carried.decide(decide, grid), budget=2)

A held-out fold's model (``tabular_rl.choice.judge``) is a fair judge where what the score leaves out does not depend on the
past actions. One common case breaks it: a chain whose episode succeeds only if every step does (the arithmetic
chain: a wrong total is where the next operation starts), so a step that fails dooms the episode while it goes on.
A gate's score reads the state and not whether an earlier step failed; the judge's model, over that score alone,
then sees a doomed and a live episode as one state, and an intervention that saves a step early is worth nothing
in it (the episode's success is credited at its last step, reached from the same states either way). Member
selection read with that judge preferred tables solved in the same blind model over the threshold on the same
score, which did better on the test episodes (RESULTS, arithmetic chain).

The logged step rewards do say which steps failed. So where the rows show it (every episode's success is "every
step rewarded", and some failed step is not the last), the judge's state is the grid's cell and whether an earlier
step failed: a row's score becomes its cell's index, moved past every live cell after a failed step (indices, so
no score crosses an edge by rounding), and a member still decides on the score alone (``decide`` reads each cell at
its representative score). The policy being judged never reads the flag; only the model that judges it does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..discretize import Discretizer
from ..transitions import DEFAULT_COLUMNS, Columns

FAILED = 0.5
"""A step reward below this is a failed step; an episode success below it a failed episode."""
AGREEING = 0.98
"""Share of episodes whose success must be "every step rewarded" (two slips of the chain can cancel out)."""


def _earlier_failure(rows: pl.DataFrame, columns: Columns) -> pl.Expr:
    failed = (pl.col(columns.reward) < FAILED).cast(pl.Int32)
    return (failed.cum_sum().over(columns.episode, order_by=columns.step) - failed) > 0


def _per_episode(rows: pl.DataFrame, c: Columns) -> pl.DataFrame | None:
    if c.success is None or c.success not in rows.columns or rows.height == 0:
        return None
    return rows.group_by(c.episode).agg(
        every=(pl.col(c.reward) >= FAILED).all(), won=(pl.col(c.success).first() >= FAILED),
        carried=((pl.col(c.reward) < FAILED) & (pl.col(c.step) < pl.col(c.step).max())).any())


def _succeeds_by_every_step(per: pl.DataFrame | None) -> bool:
    return per is not None and float((per["every"] == per["won"]).mean()) >= AGREEING


def carries_failure(rows: pl.DataFrame, columns: Columns = DEFAULT_COLUMNS) -> bool:
    """Whether the rows' episodes succeed when every step is rewarded and fail otherwise (all but ``AGREEING``'s
    rest), and some failed step is not the episode's last (a failure carried on without ending it)."""
    per = _per_episode(rows, columns)
    return _succeeds_by_every_step(per) and bool(per["carried"].any())


@dataclass(frozen=True)
class CarriedFailure:
    """The judge's state: a grid's cell and whether an earlier step failed (module docstring)."""

    columns: Columns = DEFAULT_COLUMNS

    @classmethod
    def of(cls, *frames: pl.DataFrame, columns: Columns = DEFAULT_COLUMNS) -> CarriedFailure | None:
        """The memory for these frames, or None where they carry no failure (every frame's episodes succeed by
        every step, and one of them carries a failure on: ``carries_failure``)."""
        per = [_per_episode(f, columns) for f in frames]  # once per frame: this runs for every fold read
        if not per or not all(_succeeds_by_every_step(p) for p in per) or not any(p["carried"].any() for p in per):
            return None
        return cls(columns)

    def rows(self, rows: pl.DataFrame, grid: Discretizer) -> pl.DataFrame:
        """``rows`` with the score replaced by its cell on ``grid`` (a live cell ``k`` as ``k``, the same cell after
        a failed step as ``k`` plus the grid's cells), NaN kept: exact, so no score crosses an edge."""
        c, cells = self.columns, grid.bins
        score = rows[c.score].cast(pl.Float64).to_numpy()
        cell = grid.transform(score).astype(np.float64)
        cell[np.isnan(score)] = np.nan
        return rows.with_columns(pl.Series(c.score, cell)).with_columns(
            pl.when(_earlier_failure(rows, c)).then(pl.col(c.score) + cells).otherwise(pl.col(c.score)).alias(c.score))

    def grid(self, grid: Discretizer) -> Discretizer:
        """The grid over ``rows``' cells: every live cell, then every cell after a failed step."""
        from .judge import grid_of

        return grid_of([np.arange(2 * grid.bins - 1) + 0.5])

    def decide(self, decide: Callable, grid: Discretizer) -> Callable:
        """``decide`` over ``self.grid(grid)``'s cells: each read at its cell's representative score on ``grid``."""
        from .judge import representatives

        scores, cells, memory = representatives(grid), grid.bins, self.grid(grid)

        def on_cells(step, score, budget_left):
            cell = memory.transform(np.asarray(score, dtype=np.float64))
            live = np.where(cell >= memory.bins, grid.unknown_bin, cell % cells)  # NaN: the unknown cell
            return decide(step, scores[live], budget_left)

        return on_cells
