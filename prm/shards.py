"""Trajectory shards as the PRM reads and writes them: polars Parquet, checked, written atomically.

The PRM needs only a few columns of the trajectory schema; they are checked here with messages
that name the file and the column. Callers that hold the full schema validator can pass it in as
``validate(frame, source) -> frame`` and it runs first.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl

Validator = Callable[[pl.DataFrame, str], pl.DataFrame]

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

_KIND = {
    "episode_id": ("text", lambda t: t == pl.String),
    "state_text": ("text", lambda t: t == pl.String),
    "action_text": ("text", lambda t: t == pl.String),
    "step": ("an integer", lambda t: t.is_integer()),
    "success": ("a number", lambda t: t.is_numeric()),
    "reward": ("a number", lambda t: t.is_numeric()),
    "done": ("a boolean", lambda t: t == pl.Boolean),
}


class ShardError(ValueError):
    """A trajectory file the PRM cannot use; the message names the file and the column."""


def shard_files(directory: str | os.PathLike) -> list[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such trajectory folder. Create it with collect-offline-trajectories.")
    paths = sorted(directory.glob("*.parquet"))
    if not paths:
        raise FileNotFoundError(f"{directory}: holds no *.parquet trajectory shards.")
    return paths


def check_columns(frame: pl.DataFrame, columns: Iterable[str], source: str) -> pl.DataFrame:
    """Return ``frame`` with ``step`` as Int64 and numbers as Float64, or raise naming the column."""
    for name in columns:
        if name not in frame.columns:
            raise ShardError(
                f"{source}: missing column {name!r}, which the PRM needs. "
                "Re-create the shard with collect-offline-trajectories."
            )
        kind, ok = _KIND[name]
        if not ok(frame.schema[name]):
            raise ShardError(f"{source}: column {name!r} has type {frame.schema[name]}, expected {kind}.")
        nulls = frame[name].null_count()
        if nulls:
            raise ShardError(f"{source}: column {name!r} has {nulls} null values; fill or drop those rows.")
    casts = [pl.col("step").cast(pl.Int64)] if "step" in columns else []
    casts += [pl.col(c).cast(pl.Float64) for c in ("success", "reward") if c in columns]
    return frame.with_columns(casts)


def check_episodes(frame: pl.DataFrame, source: str) -> None:
    """Every episode must hold steps 0..n-1 exactly once (it is rendered as one sequence)."""
    bad = (
        frame.group_by("episode_id")
        .agg(pl.col("step").sort().alias("steps"), pl.len().alias("n"))
        .filter(pl.col("steps") != pl.int_ranges(0, pl.col("n")))
    )
    if bad.height:
        row = bad.row(0, named=True)
        steps = row["steps"][:12]
        raise ShardError(
            f"{source}: episode {row['episode_id']!r} has steps {steps}{'...' if row['n'] > 12 else ''}, "
            f"expected 0..{row['n'] - 1} each once ({bad.height} such episodes). Keep each episode "
            "whole within one shard and drop duplicated rows."
        )


def read_shard(
    path: str | os.PathLike, columns: Iterable[str] = SCORE_COLUMNS, validate: Validator | None = None
) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several error types for a broken file
        raise ShardError(f"{path}: not a readable Parquet file ({error}).") from error
    if validate is not None:
        frame = validate(frame, str(path))
    frame = check_columns(frame, tuple(columns), str(path))
    check_episodes(frame, str(path))
    return frame


def read_frame(
    directory: str | os.PathLike, columns: Iterable[str] = TRAIN_COLUMNS, validate: Validator | None = None
) -> pl.DataFrame:
    """All shards of a folder (the columns every shard has), sorted by (episode_id, step)."""
    frames = [read_shard(p, columns, validate) for p in shard_files(directory)]
    shared = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    frame = pl.concat([f.select(shared) for f in frames], how="vertical_relaxed")
    check_episodes(frame, str(directory))
    return frame.sort(["episode_id", "step"])


def episodes_of(frame: pl.DataFrame) -> tuple[list[str], list[tuple[list[str], list[str]]]]:
    """Episode ids and their (states, actions), in (episode_id, step) order."""
    grouped = (
        frame.sort(["episode_id", "step"]).group_by("episode_id", maintain_order=True).agg("state_text", "action_text")
    )
    ids = grouped["episode_id"].to_list()
    return ids, [(list(s), list(a)) for s, a in zip(grouped["state_text"], grouped["action_text"])]


def _atomic(path: Path, write: Callable[[str], None]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(temp)
        with open(temp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temp, path)  # atomic within one filesystem: readers see old or new, never half
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return path


def write_parquet_atomic(frame: pl.DataFrame, path: str | os.PathLike) -> Path:
    return _atomic(Path(path), frame.write_parquet)


def write_json_atomic(obj, path: str | os.PathLike) -> Path:
    def write(temp: str) -> None:
        Path(temp).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")

    return _atomic(Path(path), write)
