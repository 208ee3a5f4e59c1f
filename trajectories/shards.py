"""Trajectory shards: the one place that finds, reads and writes them.

Every stage goes through it: collection writes shards with ``write_shard`` (and resumes with a
``trajectories.manifest.Manifest``); ``prm train`` / ``prm score`` read with ``read_trajectories`` /
``read_shard``; ``helpgate solve`` and ``distill`` read the same way.

- A folder's shards are its ``*.parquet`` files, in sub-folders too (a partitioned dataset);
  names starting with ``.`` or ``_`` are skipped (``.`` is how an unfinished atomic write starts).
- A file that is not readable Parquet (truncated, corrupt) is refused naming the file; a folder
  whose shards hold no rows is refused as empty (``EmptyDataset``); a folder's shards must be
  what its manifests recorded (``trajectories.manifest.check_manifests``).
- A folder is read only as a finished collection: its ``manifest.json`` must say ``complete: true``
  (``trajectories.manifest.require_complete``); ``allow_incomplete=True`` (a command's
  ``--allow-incomplete``) reads it anyway with a warning. A single shard file is read as named.
- A folder's shards must hold the bytes its manifests recorded (``trajectories.content``: another run's
  shard copied over one of ours is refused); a folder read for its scores must be scored by one PRM
  (``trajectories.scored_by``).
- Every shard read or written is validated (``trajectories.schema.validate``); writes are atomic
  (``trajectories.files.write_atomic``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from trajectories.content import check_content
from trajectories.files import sha256_of, write_atomic
from trajectories.manifest import MANIFEST, Manifest, check_manifests, helps_of, require_complete
from trajectories.schema import (HELP_COLUMNS, PROPOSAL_DEFAULTS, EmptyDataset, SchemaError, check_episodes,
                                 validate, with_help_defaults, with_proposal_defaults)
from trajectories.scored_by import check_one_prm


def shard_paths(data: str | os.PathLike, allow_incomplete: bool | None = False) -> list[Path]:
    """The shards of ``data``: the file itself, or every ``*.parquet`` below the folder, sorted; a
    folder that is not a finished collection is refused unless ``allow_incomplete`` (None: not
    checked at all, for a writer listing its own shards)."""
    if not str(data).strip():  # Path("") is the current folder: never search it by accident
        raise ValueError("data='': name the trajectory folder (or one shard), e.g. --data runs/demo/trajectories")
    data = Path(data)
    if data.is_file():
        return [data]
    if not data.is_dir():
        raise FileNotFoundError(f"{data}: no such trajectory folder. Create it with collect-offline-trajectories.")
    paths = sorted(p for p in data.rglob("*.parquet")
                   if not any(part.startswith((".", "_")) for part in p.relative_to(data).parts))
    if not paths:
        raise EmptyDataset(f"{data}: the dataset is empty (no *.parquet shards); collect trajectories first "
                           "(helpgate collect).")
    if allow_incomplete is not None:
        require_complete(data, allow_incomplete)
    return paths


def read_shard(path: str | os.PathLike, require: Iterable[str] | None = None,
               whole_episodes: bool = False) -> pl.DataFrame:
    """One shard, validated (see ``validate``); an unreadable file is refused naming it."""
    try:
        frame = pl.read_parquet(path)
    except Exception as error:  # polars raises several error types for a broken file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SchemaError(f"{path}: not a readable Parquet file, truncated or corrupt ({first}); "
                          "re-create or delete it.") from error
    frame = validate(frame, path, require)
    if whole_episodes:
        check_episodes(frame, path)
    return frame


def read_trajectories(data: str | os.PathLike, require: Iterable[str] | None = None,
                      whole_episodes: bool = False, allow_incomplete: bool = False) -> pl.DataFrame:
    """Every shard of ``data`` validated, concatenated (the columns all shards have), sorted by
    (episode_id, step); an empty dataset, or an unfinished one (unless ``allow_incomplete``), is refused."""
    require = None if require is None else list(require)
    paths = shard_paths(data, allow_incomplete)
    frames = [read_shard(path, require, whole_episodes) for path in paths]
    if Path(data).is_dir():
        check_manifests(Path(data), dict(zip(paths, frames)))
        check_content(Path(data), paths)  # after the columns: a shard's own fault is named first
        if "prm_score" in (require or ()):  # scores read: one PRM's, to the end
            check_one_prm(Path(data), [p.relative_to(data).as_posix() for p, f in zip(paths, frames)
                                       if "prm_score" in f.columns])
    if any(name in f.columns for f in frames for name in PROPOSAL_DEFAULTS):
        # Shards from before the proposal columns keep their rows next to newer ones.
        frames = [with_proposal_defaults(f) for f in frames]
    if any(name in f.columns for f in frames for name in HELP_COLUMNS):
        # Shards of one kind (an older release's) read as that kind beside shards that name theirs.
        kind = helps_of(data)[0]
        frames = [with_help_defaults(f, kind.name, kind.price) for f in frames]
    columns = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    frame = pl.concat([f.select(columns) for f in frames], how="vertical_relaxed")
    if frame.height == 0:
        raise EmptyDataset(f"{data}: the dataset is empty (no rows in {len(frames)} shard"
                           f"{'s' if len(frames) > 1 else ''}); collect trajectories first (helpgate collect).")
    if whole_episodes and len(frames) > 1:
        check_episodes(frame, data)
    return frame.sort(["episode_id", "step"])


def write_shard(frame: pl.DataFrame, path: str | os.PathLike, require: Iterable[str] | None = None) -> Path:
    """Validate (see ``validate``) and write one Parquet shard atomically."""
    frame = validate(frame, path, require)
    return write_atomic(path, frame.write_parquet)


def mark_complete(data: str | os.PathLike, config: dict[str, Any] | None = None) -> Path:
    """Declare the shards below ``data`` a finished collection (shards written by one's own code):
    ``manifest.json`` lists each with its rows and episodes, ``complete: true``."""
    data = Path(data)
    shards = {}
    for shard in shard_paths(data, allow_incomplete=None):
        frame = read_shard(shard, require=())  # types checked; the columns are the readers' to require
        info: dict[str, Any] = {"rows": frame.height, "sha256": sha256_of(shard)}
        if "episode_id" in frame.columns:
            ids = frame["episode_id"].unique(maintain_order=True).to_list()
            info |= {"count": len(ids), "episodes": ids}
        shards[shard.relative_to(data).as_posix()] = info
    manifest = Manifest(data / MANIFEST, dict(config or {}), shards, complete=True)
    manifest.save()
    return manifest.path
