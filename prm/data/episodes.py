"""The trajectory columns the PRM reads, and episodes as the sequences it renders.

Reading, validation, atomic writes and resume are the floor's (``trajectories``); ``prm
train`` / ``prm score`` read with ``whole_episodes=True``: every episode must be whole (steps
0..n-1), since it is rendered as one sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from trajectories.schema import SchemaError

Validator = Callable[[pl.DataFrame, str], pl.DataFrame]
"""An extra check ``validate(frame, source) -> frame`` a caller may add after the schema's own."""

SCORE_COLUMNS = ("episode_id", "step", "state_text", "action_text")
"""Columns ``prm score`` reads."""
FEATURES_FILE = "features.npz"
"""Frozen-backbone features of the training episodes, saved by ``prm train`` in the PRM folder so
that ``prm score`` does not run the backbone again on the same episodes."""
OOF_FILE = "oof_scores.parquet"
"""Out-of-fold scores of the training episodes (``prm train``): ``prm score`` writes these for
exactly those episodes (same text), so nothing fitted on them saw a score of a head that saw them."""
TRAIN_COLUMNS = SCORE_COLUMNS + ("success", "reward", "done")
"""Columns ``prm train`` reads."""


def score_columns(tag_after: str, columns: tuple[str, ...] = SCORE_COLUMNS) -> tuple[str, ...]:
    """``columns`` plus ``proposal_text`` for a PRM that renders proposals."""
    return columns + ("proposal_text",) if tag_after == "proposal" else columns

__all__ = ["FEATURES_FILE", "OOF_FILE", "SCORE_COLUMNS", "TRAIN_COLUMNS", "Validator", "episodes_of",
           "require_proposals", "score_columns"]


def episodes_of(frame: pl.DataFrame, tag_after: str = "action") -> tuple[list[str], list[tuple[list[str], ...]]]:
    """Episode ids and their (states, actions), in (episode_id, step) order; with
    ``tag_after="proposal"`` (states, actions, proposals), read from ``proposal_text``."""
    columns = ["state_text", "action_text"] + (["proposal_text"] if tag_after == "proposal" else [])
    if "proposal_text" in columns:
        require_proposals(frame, "the data")
    grouped = frame.sort(["episode_id", "step"]).group_by("episode_id", maintain_order=True).agg(*columns)
    ids = grouped["episode_id"].to_list()
    return ids, [tuple(list(values) for values in row) for row in zip(*(grouped[c] for c in columns))]


def require_proposals(frame: pl.DataFrame, source: str) -> None:
    """Refuse a frame whose rows have no logged proposal (collected in ``state`` mode or before)."""
    missing = frame.height if "proposal_text" not in frame.columns else frame.filter(
        pl.col("proposal_text").is_null() | (pl.col("proposal_text") == "")).height
    if missing:
        raise SchemaError(
            f"{source}: {missing} of {frame.height} rows have no proposal_text, which tag_after='proposal' renders; "
            "collect the trajectories with --decide-after proposal (or train with --tag-after state)."
        )
