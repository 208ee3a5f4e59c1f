"""The manifest of an output folder: which shards are finished, and the config that made them.

``Manifest``: ``<folder>/<name>.json`` lists the shards that are finished, with the config that
made them; it is rewritten atomically after each shard, so a killed run resumes without losing or
duplicating a shard. ``check_manifests``: a folder's shards are what its manifests recorded.
``require_complete``: a folder read as a collection has a manifest that says it is complete (a
collection killed part way, or shards without a manifest, are refused unless the caller allows them
and records that it did); ``trajectories.shards.mark_complete`` declares shards written by one's own code finished.
Each finished shard is recorded with the SHA-256 of its bytes (``trajectories.content`` checks them); every
field is checked for its type when a manifest is read (``trajectories.manifest_fields``).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from trajectories.files import sha256_of, write_json_atomic
from trajectories.helps import HelpKind, check_spend, kinds_in
from trajectories.manifest_fields import check_fields
from trajectories.schema import DECIDE_AFTER_DEFAULT, SchemaError

MANIFEST = "manifest.json"
"""A collection's manifest, in the folder it describes."""
VERSION = 1


class ConfigMismatch(ValueError):
    """The folder was written with another config; the message names the field."""


SCORE_MANIFEST = "prm_score.manifest.json"
"""The progress manifest ``prm score`` keeps in its output folder (shards it scored, with rows)."""


class IncompleteCollection(SchemaError):
    """A trajectory folder whose ``manifest.json`` is missing or says ``complete: false``."""


ALLOW_FLAG = "--allow-incomplete"
"""The option of every command that reads a collection: use an unfinished one anyway (recorded)."""


def incompleteness(data: str | os.PathLike) -> dict[str, Any] | None:
    """None where ``data`` (a folder) is a finished collection; else what is unfinished:
    ``{"data": folder, "manifest": "missing" | "complete: false", "finished_shards": n}``."""
    data = Path(data)
    path = data / MANIFEST
    if not path.is_file():
        return {"data": str(data), "manifest": "missing", "finished_shards": None}
    manifest = load_manifest(path)
    if manifest.get("complete") is True:
        return None
    return {"data": str(data), "manifest": "complete: false", "finished_shards": len(manifest.get("shards", {}))}


def require_complete(data: str | os.PathLike, allow_incomplete: bool = False) -> dict[str, Any] | None:
    """Refuse (``IncompleteCollection``, one line naming the folder and what to do) a folder that is not a
    finished collection; with ``allow_incomplete`` warn once instead and return what is unfinished, for
    the caller to record in its output. A single shard file is read as named (None)."""
    data = Path(data)
    if not data.is_dir():
        return None
    problem = incompleteness(data)
    if problem is None:
        return None
    if problem["manifest"] == "missing":
        text = (f"{data}: no {MANIFEST}, so its shards are not known to be a finished collection (a collect writes "
                "it with complete: true once every shard is written; a folder copied or cut short has none); rerun "
                "the collect (or the prm score) that wrote the folder to finish it, declare shards written by your "
                "own code finished with trajectories.shards.mark_complete, or pass "
                f"{ALLOW_FLAG} to use them as they are (recorded in the output)")
    else:
        text = (f"{data / MANIFEST}: complete: false ({problem['finished_shards']} finished shards): the collection "
                "stopped before it finished; rerun the same collect to finish it (it resumes), or pass "
                f"{ALLOW_FLAG} to use the finished shards as they are (recorded in the output)")
    if not allow_incomplete:
        raise IncompleteCollection(text + ".")
    warnings.warn(f"{text.split(';')[0]}; used anyway ({ALLOW_FLAG}).", stacklevel=3)
    return problem


def load_manifest(path: Path) -> dict[str, Any]:
    """A manifest's JSON object, refused in one line (naming it) when it is not one."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SchemaError(f"{path}: not valid JSON ({error.msg}); delete it and rerun the command that wrote the "
                          "folder (a collect with the same arguments starts over).") from error
    if not isinstance(data, dict) or not isinstance(data.get("shards", {}), dict):
        raise SchemaError(f"{path}: a JSON {type(data).__name__}, not a manifest (an object whose 'shards' maps each "
                          "finished shard to what was recorded); delete it and rerun the command that wrote the folder.")
    check_fields(path, data)  # a field of the wrong type is refused, never read as "no check"
    return data


def check_manifests(data: Path, frames: dict[Path, pl.DataFrame]) -> None:
    """The shards of ``data`` are what its manifests recorded, or ``SchemaError`` naming the file.

    Every shard a manifest lists exists and holds the recorded rows, episode count and episode ids;
    a complete collection lists every shard there is; no episode is in two shards of it; and no
    episode uses more interventions, or starts with more budget, than the collection's budget."""
    by_name = {path.relative_to(data).as_posix(): frame for path, frame in frames.items()}
    for name in (MANIFEST, SCORE_MANIFEST):
        path = data / name
        if not path.is_file():
            continue
        manifest = load_manifest(path)
        for shard, info in manifest.get("shards", {}).items():
            if shard not in by_name:
                raise SchemaError(f"{data / shard}: listed as finished in {path} but missing; restore it, or delete "
                                  f"{path} and rerun the command that wrote {data}.")
            _check_recorded(data / shard, by_name[shard], info, path)
        if name == MANIFEST and manifest.get("complete") is True:
            _check_complete(data, path, manifest, by_name)


def _check_recorded(shard: Path, frame: pl.DataFrame, info: dict, manifest: Path) -> None:
    redo = f"delete {shard.name} and rerun the same command to re-create it"
    if "rows" in info and frame.height != info["rows"]:
        raise SchemaError(f"{shard}: holds {frame.height} rows, but {manifest} recorded {info['rows']}; {redo}.")
    if "episode_id" not in frame.columns:
        return
    ids = frame["episode_id"].unique()
    if "count" in info and ids.len() != info["count"]:
        raise SchemaError(f"{shard}: holds {ids.len()} episodes, but {manifest} recorded {info['count']}; {redo}.")
    if "episodes" in info and set(ids.to_list()) != set(info["episodes"]):
        strange = sorted(set(ids.to_list()) ^ set(info["episodes"]))[:3]
        raise SchemaError(f"{shard}: its episodes are not the ones {manifest} recorded (e.g. {strange}): a shard "
                          f"of another run; {redo}.")


def _check_complete(data: Path, path: Path, manifest: dict, by_name: dict[str, pl.DataFrame]) -> None:
    listed = manifest.get("shards", {})
    extra = sorted(name for name in by_name if name not in listed)
    if extra:
        raise SchemaError(f"{data / extra[0]}: not listed in {path}, which says the collection is complete: a shard "
                          "of another run; move it out of the folder.")
    frames = [by_name[name] for name in listed]
    if not frames or "episode_id" not in frames[0].columns:
        return
    ids = pl.concat([f.select("episode_id").unique() for f in frames])
    twice = ids.filter(ids["episode_id"].is_duplicated())["episode_id"].unique().sort()
    if twice.len():
        owners = [name for name in listed if by_name[name]["episode_id"].is_in(twice.implode()).any()]
        raise SchemaError(f"{data}: episode {twice[0]!r} is in {owners[0]} and {owners[1]} ({twice.len()} such "
                          "episodes): a shard copied over another; delete the copy and rerun the collect to "
                          "re-create it.")
    budget = manifest.get("config", {}).get("budget")
    if "helps" in manifest.get("config", {}):  # priced kinds: the budget is spent in cost, not in calls
        kinds = kinds_in(manifest["config"], str(path))
        for name in listed:
            check_spend(by_name[name], kinds, budget, data / name)
        return
    if not isinstance(budget, int) or not all({"budget_left", "intervened"} <= set(f.columns) for f in frames):
        return
    for name in listed:
        episodes = by_name[name].group_by("episode_id").agg(pl.col("intervened").sum().alias("used"),
                                                           pl.col("budget_left").max().alias("start"))
        over = episodes.filter((pl.col("used") > budget) | (pl.col("start") > budget))
        if over.height:
            row = over.row(0, named=True)
            raise SchemaError(f"{data / name}: episode {row['episode_id']!r} has {row['used']} interventions and "
                              f"budget_left up to {row['start']}, but {path} says budget={budget}: a shard of "
                              "another collection; move it out of the folder.")


def helps_of(data: str | os.PathLike) -> list[HelpKind]:
    """The kinds of help a trajectory folder's collection called, with their prices and caps (its
    ``manifest.json``, ``trajectories.helps``); a folder without one, or of one kind, called its strong actor."""
    path = Path(data)
    path = path / MANIFEST if path.is_dir() else path.parent / MANIFEST
    if not path.is_file():
        return kinds_in({})
    config = load_manifest(path).get("config", {})
    return kinds_in(config if isinstance(config, dict) else {}, str(path))


def decide_after_of(data: str | os.PathLike) -> str:
    """The ``decide_after`` a trajectory folder was collected with (its ``manifest.json``; default
    ``state`` for a folder without one or collected before the option)."""
    path = Path(data)
    path = path / MANIFEST if path.is_dir() else path.parent / MANIFEST
    if not path.exists():
        return DECIDE_AFTER_DEFAULT
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return DECIDE_AFTER_DEFAULT
    config = data.get("config") if isinstance(data, dict) else None  # a malformed file is refused by its readers
    return str((config if isinstance(config, dict) else {}).get("decide_after", DECIDE_AFTER_DEFAULT))


@dataclass
class Manifest:
    """The finished shards of an output folder and the config that made them (see module doc)."""

    path: Path
    config: dict[str, Any]
    shards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Finished shards: path relative to the folder -> what the writer recorded."""
    complete: bool = False
    stamp: bool = False
    """Record each shard's size and mtime; a shard changed since (rewritten) counts as unfinished."""

    @classmethod
    def open(cls, out: str | os.PathLike, config: dict[str, Any], ignore: tuple[str, ...] = (),
             name: str = MANIFEST, on_change: Literal["refuse", "restart"] = "refuse",
             own_folder: bool = True, stamp: bool = False, defaults: dict[str, Any] | None = None) -> Manifest:
        """Load ``out/name`` and check it was written with ``config`` (fields in ``ignore`` may
        differ), or start a new one. Another config is refused (``ConfigMismatch``) or, with
        ``on_change="restart"``, starts over. ``own_folder``: the folder must be new or empty
        when there is no manifest yet (it will hold only what this run writes). ``defaults``: the
        value a stored config lacking a field had (a field added since it was written)."""
        out = Path(out)
        path = out / name
        if path.exists():
            try:
                data = load_manifest(path)
            except SchemaError:
                if on_change != "restart":
                    raise
                data = {}
            stored = dict(defaults or {}) | (data.get("config") if isinstance(data.get("config"), dict) else {})
            differing = [key for key in sorted(set(stored) | set(config))
                         if key not in ignore and stored.get(key) != config.get(key)]
            if not differing:
                return cls(path, stored, data.get("shards", {}), bool(data.get("complete", False)), stamp)
            # A run that failed before finishing any shard kept nothing: its corrected rerun starts over.
            if on_change == "refuse" and (data.get("shards") or data.get("complete")):
                was = ", ".join(f"{key}={stored.get(key)!r}" for key in differing)
                now = ", ".join(f"{key}={config.get(key)!r}" for key in differing)
                raise ConfigMismatch(
                    f"{out} was written with {was}, but this run has {now}. Rerun with the same "
                    f"arguments to resume, delete {out} to start over, or choose another --out."
                )
        elif own_folder and out.exists() and any(p for p in out.iterdir() if not p.name.startswith(".")):
            raise FileExistsError(
                f"{out} already holds files but no {name}: it was not written by this command. "
                "Choose an empty or new --out folder."
            )
        manifest = cls(path, dict(config), stamp=stamp)
        manifest.save()
        return manifest

    def save(self) -> None:
        write_json_atomic(
            {"version": VERSION, "config": self.config, "shards": self.shards, "complete": self.complete},
            self.path,
        )

    def mark_done(self, name: str, **info) -> None:
        """Record shard ``name`` (relative to the folder) as finished, with ``info`` and its content hash."""
        target = self.path.parent / name
        if target.is_file():
            info |= {"sha256": sha256_of(target)}
        if self.stamp:
            stat = target.stat()
            info |= {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        self.shards[name] = info
        self.save()

    def is_done(self, name: str) -> bool:
        entry = self.shards.get(name)
        target = self.path.parent / name
        if entry is None or not target.exists():
            return False
        if not self.stamp:
            return True
        stat = target.stat()
        return entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns

    def finish(self) -> None:
        """Every shard is written: readers may trust the folder as a whole collection."""
        self.complete = True
        self.save()

    def forget(self) -> None:
        """Start over: no shard counts as finished."""
        self.shards, self.complete = {}, False
        self.save()
