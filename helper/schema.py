"""The offline dataset: one row per decision point, stored as Parquet shards.

This module is the single home of the trajectory schema. Every reader goes through
``read_trajectories`` (which validates) and every writer through ``write_shard`` (atomic:
temp file + rename), so a killed run never leaves a half-written shard behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import polars as pl

SCHEMA: dict[str, pl.DataType] = {
    "episode_id": pl.String,
    "step": pl.Int64,
    "env": pl.String,
    "task_id": pl.String,
    "state_text": pl.String,
    "action_text": pl.String,
    "actor": pl.String,
    "intervened": pl.Boolean,
    "budget_left": pl.Int64,
    "reward": pl.Float64,
    "done": pl.Boolean,
    "success": pl.Float64,
    "explore_p": pl.Float64,
    "seed": pl.Int64,
}
"""Columns every shard must have, with their types."""

OPTIONAL: dict[str, pl.DataType] = {
    "prm_score": pl.Float64,
    "horizon": pl.Int64,
    "features": pl.String,
    "cf_base_success": pl.Float64,
    "cf_intervene_success": pl.Float64,
}
"""Columns added by later stages or by counterfactual collection; typed when present.

``features`` holds the observation's numeric side information as a JSON object;
``cf_*_success`` hold the counterfactual outcomes (base acts / intervention here, then the
same continuation policy) recorded by ``collect-offline-trajectories --counterfactual``.
"""

ALL_COLUMNS = {**SCHEMA, **OPTIONAL}


class SchemaError(ValueError):
    """A trajectory file that does not match the schema; the message names file and column."""


def _cast_integral(frame: pl.DataFrame) -> pl.DataFrame:
    # Parquet written by other tools may store small ints as Int32; accept any integer width.
    casts = [
        pl.col(name).cast(dtype)
        for name, dtype in ALL_COLUMNS.items()
        if name in frame.columns and dtype == pl.Int64 and frame.schema[name].is_integer()
    ]
    return frame.with_columns(casts) if casts else frame


def validate(frame: pl.DataFrame, source: str | os.PathLike = "<frame>") -> pl.DataFrame:
    """Return ``frame`` with canonical dtypes, or raise ``SchemaError`` naming file and column."""
    missing = [name for name in SCHEMA if name not in frame.columns]
    if missing:
        raise SchemaError(
            f"{source}: missing column {missing[0]!r}"
            + (f" (and {missing[1:]})" if len(missing) > 1 else "")
            + f". Trajectory shards need the columns {list(SCHEMA)}; "
            "re-create them with collect-offline-trajectories."
        )
    frame = _cast_integral(frame)
    for name, dtype in ALL_COLUMNS.items():
        if name in frame.columns and frame.schema[name] != dtype:
            if dtype == pl.Float64 and frame.schema[name].is_numeric():
                frame = frame.with_columns(pl.col(name).cast(pl.Float64))
                continue
            raise SchemaError(
                f"{source}: column {name!r} has type {frame.schema[name]}, expected {dtype}."
            )
    return frame


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def write_shard(frame: pl.DataFrame, path: str | os.PathLike) -> Path:
    """Validate and write one Parquet shard atomically (temp file in the same folder + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = validate(frame, path)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        frame.write_parquet(temp)
        with open(temp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return path


def write_json_atomic(obj, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(obj, out, indent=2, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    return path


def read_kind_json(path: str | os.PathLike, kind: str, what: str) -> dict:
    """A saved component's JSON description, refused with the path when missing or of another kind.

    ``what`` names the expected folder for the error ("a text-backend classifier folder")."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found; is {path.parent} {what}?")
    meta = json.loads(path.read_text())
    if meta.get("kind") != kind:
        raise ValueError(f"{path}: kind={meta.get('kind')!r}, expected {kind!r}")
    return meta


def shard_paths(directory: str | os.PathLike) -> list[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"{directory}: no such trajectory folder. Create it with collect-offline-trajectories."
        )
    paths = sorted(directory.glob("*.parquet"))
    if not paths:
        raise FileNotFoundError(f"{directory}: holds no *.parquet trajectory shards.")
    return paths


def read_shard(path: str | os.PathLike) -> pl.DataFrame:
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several error types for a broken file
        raise SchemaError(f"{path}: not a readable Parquet file ({error}).") from error
    return validate(frame, path)


def read_trajectories(directory: str | os.PathLike) -> pl.DataFrame:
    """All shards of a folder, validated, sorted by (episode_id, step)."""
    frames = [read_shard(path) for path in shard_paths(directory)]
    columns = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    frame = pl.concat([f.select(columns) for f in frames], how="vertical")
    return frame.sort(["episode_id", "step"])
