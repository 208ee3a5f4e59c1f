"""Trajectory shards as the PRM reads them: the columns it needs, through ``agile.dataset``.

Reading, validation, atomic writes and resume all live in ``agile.dataset`` (the one data
module; ``prm`` may import only ``agile``). This module names the PRM's columns and keeps the
helpers ``prm train`` / ``prm score`` call: every episode must be whole (steps 0..n-1), since it
is rendered as one sequence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl

from agile.dataset import SchemaError, check_episodes, read_trajectories, shard_paths, validate
from agile.dataset import read_shard as _read_shard

Validator = Callable[[pl.DataFrame, str], pl.DataFrame]
"""An extra check ``validate(frame, source) -> frame`` a caller may add after the schema's own."""

ShardError = SchemaError
"""A trajectory file the PRM cannot use (the dataset's ``SchemaError``): names file and column."""

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

__all__ = ["FEATURES_FILE", "SCORE_COLUMNS", "TRAIN_COLUMNS", "ShardError", "Validator", "check_columns",
           "check_episodes", "episodes_of", "read_frame", "read_shard", "require_proposals", "score_columns",
           "shard_files"]


def shard_files(directory: str | os.PathLike) -> list[Path]:
    return shard_paths(directory)


def check_columns(frame: pl.DataFrame, columns: Iterable[str], source: str) -> pl.DataFrame:
    """``frame`` validated with ``columns`` required (canonical dtypes), or ``ShardError``."""
    return validate(frame, source, require=tuple(columns))


def read_shard(
    path: str | os.PathLike, columns: Iterable[str] = SCORE_COLUMNS, validate: Validator | None = None
) -> pl.DataFrame:
    frame = _read_shard(path, require=tuple(columns), whole_episodes=True)
    return frame if validate is None else validate(frame, str(path))


def read_frame(
    directory: str | os.PathLike, columns: Iterable[str] = TRAIN_COLUMNS, validate: Validator | None = None
) -> pl.DataFrame:
    """All shards of a folder (the columns every shard has), sorted by (episode_id, step)."""
    frame = read_trajectories(directory, require=tuple(columns), whole_episodes=True)
    return frame if validate is None else validate(frame, str(directory))


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
        raise ShardError(
            f"{source}: {missing} of {frame.height} rows have no proposal_text, which tag_after='proposal' renders; "
            "collect the trajectories with --decide-after proposal (or train with --tag-after state)."
        )
