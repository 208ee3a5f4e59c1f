"""The column names of the offline dataset that tabular_rl reads (``Columns``), apart from every room that reads
them, so that none of those rooms needs another to name a column."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Columns:
    """Column names of the offline dataset that tabular_rl reads."""

    episode: str = "episode_id"
    step: str = "step"
    action: str = "intervened"
    budget_left: str = "budget_left"
    reward: str = "reward"
    done: str = "done"
    success: str | None = "success"
    score: str = "prm_score"


DEFAULT_COLUMNS = Columns()
