"""What both solves (``solve_command``, one kind; ``tiered_solve``, kinds at their prices) read off the rows and flags
the same way: the default budgets, an episode's one outcome, the back-off flag, each row's own outcome."""

from __future__ import annotations

import numpy as np
import polars as pl

from tabular_rl.transitions import Columns

DEFAULT_BUDGETS = (1, 2, 3)


def one_outcome(df: pl.DataFrame, data) -> None:
    """Refuse an episode whose rows disagree on its ``success`` (the episode's outcome, the same on every row): an
    edited shard would otherwise be solved on whichever row the estimate read."""
    if "success" not in df.columns:
        return
    mixed = (df.group_by("episode_id").agg(pl.col("success").min().alias("low"), pl.col("success").max().alias("high"))
             .filter(pl.col("low") != pl.col("high")).sort("episode_id"))
    if mixed.height:
        row = mixed.row(0, named=True)
        raise ValueError(f"{data}: episode {row['episode_id']!r} has success {row['low']:g} on one row and "
                         f"{row['high']:g} on another ({mixed.height} such episodes); an episode's outcome is the same "
                         "on every row: a shard was edited or mixed, re-create it.")


def parse_backoff(value: str | float) -> str | float:
    """``auto`` or a weight >= 0 (the CLI passes text)."""
    if value == "auto":
        return value
    try:
        weight = float(value)
    except (TypeError, ValueError):
        weight = -1.0
    if not 0 <= weight < float("inf"):
        raise ValueError(f"backoff={value!r}: give a finite weight >= 0 (e.g. --backoff 5) or --backoff auto")
    return weight


def own_rewards(df: pl.DataFrame, cols: Columns) -> np.ndarray:
    """Each row's outcome where the agent acted, NaN where an intervention did (its outcome is the helper's, not
    the agent's): what supervised bins separate. The outcome is the step's reward where the environment rewards
    steps; where only the end is rewarded (every non-final reward 0) and episodes have a success column, whether
    the agent survived its step: 0 on the step a failed episode ended on, 1 on any other (``label_fatal``)."""
    from prm.data.labels import has_process_rewards

    outcome = pl.col(cols.reward).cast(pl.Float64)
    if cols.success in df.columns and not has_process_rewards(df):
        fatal = ((pl.col(cols.success).cast(pl.Float64) < 0.5)
                 & (pl.col(cols.step) == pl.col(cols.step).max().over(cols.episode)))
        outcome = pl.when(fatal).then(0.0).otherwise(1.0)
    return df.select(pl.when(pl.col(cols.action).cast(pl.Boolean)).then(None)
                     .otherwise(outcome)).to_series().to_numpy()
