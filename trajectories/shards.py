"""The offline dataset: one row per decision point, stored as Parquet shards. The one module that
reads, validates, writes (atomically) and resumes shards.

Every stage goes through it: collection writes shards with ``write_shard`` and resumes with a
``Manifest``; ``prm train`` / ``prm score`` read with ``read_trajectories`` / ``read_shard`` and
``prm score`` resumes with a ``Manifest`` too; ``helpgate solve`` and ``distill`` read the same
way.

It is the floor of the house (it imports nothing of ours): ``agile`` (whose ``rollout`` produces
the rows), ``prm`` and ``helper`` all stand on it.

Rules:

- ``validate(frame, source, require)``: every column in ``require`` (default: ``SCHEMA``) must be
  there, without nulls; every known column present (``ALL_COLUMNS``) must have its type. Integer
  columns accept any integer width, number columns any integer or float (widened, never
  narrowed); nothing is ever converted from text: a ``step`` stored as strings is refused, with
  the file and the column named.
- A folder's shards are its ``*.parquet`` files, in sub-folders too (a partitioned dataset);
  names starting with ``.`` or ``_`` are skipped (``.`` is how an unfinished atomic write starts).
- A file that is not readable Parquet (truncated, corrupt) is refused naming the file; a folder
  whose shards hold no rows is refused as empty (``EmptyDataset``).
- Writes go to a temp file in the same folder, fsynced, then renamed over the target: a reader
  sees the old file or the new one, never half of one.
- ``Manifest``: ``<folder>/<name>.json`` lists the shards that are finished, with the config that
  made them; it is rewritten atomically after each shard, so a killed run resumes without
  losing or duplicating a shard.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
"""Columns every collected shard has, with their types."""

OPTIONAL: dict[str, pl.DataType] = {
    "prm_score": pl.Float64,
    "horizon": pl.Int64,
    "features": pl.String,
    "cf_base_success": pl.Float64,
    "cf_intervene_success": pl.Float64,
    "proposal_text": pl.String,
    "proposal_reward": pl.Float64,
    "proposal_signals": pl.String,
}
"""Columns added by later stages or by counterfactual collection; typed when present.

``proposal_text`` / ``proposal_reward`` / ``proposal_signals`` hold, at every decision point, what
the base agent proposed, that proposal's immediate reward and the agent's numbers about it (a JSON
object), also where an intervention replaced it (``collect-offline-trajectories --decide-after
proposal``); a dataset collected before them, or in ``state`` mode, reads as ``PROPOSAL_DEFAULTS``.

``features`` holds the observation's numeric side information as a JSON object;
``cf_*_success`` hold the counterfactual outcomes (base acts / intervention here, then the
same continuation policy) recorded by ``collect-offline-trajectories --counterfactual``.
"""

ALL_COLUMNS = {**SCHEMA, **OPTIONAL}

PROPOSAL_DEFAULTS: dict[str, Any] = {"proposal_text": "", "proposal_reward": None, "proposal_signals": "{}"}
"""The proposal columns of a row with no proposal logged (``state`` mode, or an older dataset)."""
DECIDE_AFTER_DEFAULT = "state"
"""A dataset's ``decide_after`` when its manifest does not say (collected before the option)."""

_MADE_BY = {"prm_score": "score the shards first: helpgate prm score",
            "proposal_text": "collect the trajectories with --decide-after proposal (or use --tag-after state)"}
_EXPECTED = {pl.Int64: "an integer (Int64)", pl.Float64: "a number (Float64)", pl.Boolean: "Boolean",
             pl.String: "String"}


class SchemaError(ValueError):
    """A trajectory file that does not match the schema; the message names file and column."""


class EmptyDataset(SchemaError):
    """A trajectory folder (or file) with no rows."""


class ConfigMismatch(ValueError):
    """The folder was written with another config; the message names the field."""


# -- validation -----------------------------------------------------------------------------------
def validate(frame: pl.DataFrame, source: str | os.PathLike = "<frame>",
             require: Iterable[str] | None = None) -> pl.DataFrame:
    """``frame`` with canonical dtypes, or ``SchemaError`` naming ``source`` and the column.

    ``require``: the columns that must be present and non-null (default: every ``SCHEMA`` column);
    a stage that reads only a few passes those."""
    require = list(SCHEMA if require is None else require)
    missing = [name for name in require if name not in frame.columns]
    if missing:
        hint = next((_MADE_BY[m] for m in missing if m in _MADE_BY),
                    "re-create it with collect-offline-trajectories")
        more = f" (and {missing[1:]})" if len(missing) > 1 else ""
        raise SchemaError(f"{source}: missing column {missing[0]!r}{more}; {hint}.")
    casts = []
    for name, dtype in ALL_COLUMNS.items():
        if name not in frame.columns or frame.schema[name] == dtype:
            continue
        actual = frame.schema[name]
        widen = (actual == pl.Null or (dtype == pl.Int64 and actual.is_integer())
                 or (dtype == pl.Float64 and (actual.is_integer() or actual.is_float())))
        if not widen:
            raise SchemaError(f"{source}: column {name!r} has type {actual}, expected {_EXPECTED[dtype]}; "
                              "values are never converted from another type, re-create the shard.")
        casts.append(pl.col(name).cast(dtype))
    frame = frame.with_columns(casts) if casts else frame
    for name in require:
        nulls = frame[name].null_count()
        if nulls:
            raise SchemaError(f"{source}: column {name!r} has {nulls} null values; fill or drop those rows.")
    # NaN is a missing value (a score that could not be computed); an infinity is a bug upstream.
    for name in ("reward", "success", "prm_score", "explore_p"):
        if name in frame.columns and frame[name].is_infinite().any():
            raise SchemaError(f"{source}: column {name!r} holds an infinite value; every {name} must be finite "
                              "(NaN marks a missing score).")
    if "proposal_reward" in frame.columns and frame["proposal_reward"].is_infinite().any():
        raise SchemaError(f"{source}: column 'proposal_reward' holds an infinite value; a proposal's reward "
                          "must be finite (null where none was logged).")
    if "proposal_signals" in frame.columns:
        _check_signals(frame["proposal_signals"], source)
    for name in ("success", "explore_p", "prm_score"):
        if name in frame.columns:
            # polars orders NaN above every number; a NaN prm_score is a missing score, not out of range.
            above = (pl.col(name) > 1) & (pl.col(name).is_not_nan() if name == "prm_score" else True)
            outside = frame.filter((pl.col(name) < 0) | above).height
            if outside:
                what = ("a probability of success" if name == "prm_score"
                        else "a probability or a mean outcome")
                raise SchemaError(f"{source}: column {name!r} has {outside} values outside [0, 1]; "
                                  f"{'a decision' if name == 'prm_score' else 'an episode'}'s {name} is {what} in [0, 1].")
    for name, low in (("step", 0), ("budget_left", 0), ("horizon", 1)):
        if name in frame.columns and frame.height and (smallest := frame[name].min()) is not None and smallest < low:
            raise SchemaError(f"{source}: column {name!r} holds {smallest}; every {name} must be >= {low}.")
    return frame


def _check_signals(column: pl.Series, source) -> None:
    """Every ``proposal_signals`` value is a JSON object of finite numbers (null: none logged)."""
    for row, text in enumerate(column.to_list()):
        if text is None or text == "{}":
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        numbers = isinstance(value, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) != float("inf") for v in value.values())
        if not numbers:
            raise SchemaError(f"{source}: column 'proposal_signals' row {row} is {text[:60]!r}, not a JSON object of "
                              "finite numbers; re-create the shard.")


def with_proposal_defaults(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every proposal column, the missing ones filled with ``PROPOSAL_DEFAULTS``."""
    missing = [pl.lit(value, dtype=OPTIONAL[name]).alias(name) for name, value in PROPOSAL_DEFAULTS.items()
               if name not in frame.columns]
    return frame.with_columns(missing) if missing else frame


def check_episodes(frame: pl.DataFrame, source: str | os.PathLike) -> None:
    """Every episode must hold steps 0..n-1 exactly once (for readers that need whole episodes)."""
    bad = (
        frame.group_by("episode_id")
        .agg(pl.col("step").sort().alias("steps"), pl.len().alias("n"))
        .filter(pl.col("steps") != pl.int_ranges(0, pl.col("n")))
    )
    if bad.height:
        row = bad.row(0, named=True)
        steps = row["steps"][:12]
        raise SchemaError(
            f"{source}: episode {row['episode_id']!r} has steps {steps}{'...' if row['n'] > 12 else ''}, "
            f"expected 0..{row['n'] - 1} each once ({bad.height} such episodes). Keep each episode "
            "whole within one shard and drop duplicated rows."
        )


def empty_frame() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


# -- reading ---------------------------------------------------------------------------------------
def shard_paths(data: str | os.PathLike) -> list[Path]:
    """The shards of ``data``: the file itself, or every ``*.parquet`` below the folder, sorted."""
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
                      whole_episodes: bool = False) -> pl.DataFrame:
    """Every shard of ``data`` validated, concatenated (the columns all shards have), sorted by
    (episode_id, step); an empty dataset is refused."""
    require = None if require is None else list(require)
    paths = shard_paths(data)
    frames = [read_shard(path, require, whole_episodes) for path in paths]
    if Path(data).is_dir():
        check_manifests(Path(data), dict(zip(paths, frames)))
    if any(name in f.columns for f in frames for name in PROPOSAL_DEFAULTS):
        # Shards from before the proposal columns keep their rows next to newer ones.
        frames = [with_proposal_defaults(f) for f in frames]
    columns = [c for c in frames[0].columns if all(c in f.columns for f in frames)]
    frame = pl.concat([f.select(columns) for f in frames], how="vertical_relaxed")
    if frame.height == 0:
        raise EmptyDataset(f"{data}: the dataset is empty (no rows in {len(frames)} shard"
                           f"{'s' if len(frames) > 1 else ''}); collect trajectories first (helpgate collect).")
    if whole_episodes and len(frames) > 1:
        check_episodes(frame, data)
    return frame.sort(["episode_id", "step"])


# -- checking shards against their manifests ------------------------------------------------------
SCORE_MANIFEST = "prm_score.manifest.json"
"""The progress manifest ``prm score`` keeps in its output folder (shards it scored, with rows)."""


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
            info = info if isinstance(info, dict) else {}
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


# -- writing ---------------------------------------------------------------------------------------
def write_atomic(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(temp_path)``, fsync, then rename over ``path`` (same folder: atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(temp)
        with open(temp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return path


def write_shard(frame: pl.DataFrame, path: str | os.PathLike, require: Iterable[str] | None = None) -> Path:
    """Validate (see ``validate``) and write one Parquet shard atomically."""
    frame = validate(frame, path, require)
    return write_atomic(path, frame.write_parquet)


def decide_after_of(data: str | os.PathLike) -> str:
    """The ``decide_after`` a trajectory folder was collected with (its ``manifest.json``; default
    ``state`` for a folder without one or collected before the option)."""
    path = Path(data)
    path = path / MANIFEST if path.is_dir() else path.parent / MANIFEST
    if not path.exists():
        return DECIDE_AFTER_DEFAULT
    try:
        config = json.loads(path.read_text()).get("config", {})
    except json.JSONDecodeError:
        return DECIDE_AFTER_DEFAULT
    return str(config.get("decide_after", DECIDE_AFTER_DEFAULT))


def write_json_atomic(obj, path: str | os.PathLike) -> Path:
    def write(temp: str) -> None:
        Path(temp).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")

    return write_atomic(path, write)


def read_json_object(path: Path, writer: str, remedy: str) -> dict:
    """The JSON object a command wrote to ``path``, refused in one line naming the file when it is not
    valid JSON or not an object; ``writer`` names that command, ``remedy`` what to do."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error.msg}); {remedy}.") from error
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON {type(data).__name__}, expected the object `{writer}` writes; {remedy}.")
    return data


def read_kind_json(path: str | os.PathLike, kind: str, what: str) -> dict:
    """A saved component's JSON description, refused with the path when missing or of another kind.

    ``what`` names the expected folder for the error ("a text-backend classifier folder")."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found; is {path.parent} {what}?")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error}); re-create the folder.") from error
    if meta.get("kind") != kind:
        raise ValueError(f"{path}: kind={meta.get('kind')!r}, expected {kind!r}")
    return meta


# -- resuming --------------------------------------------------------------------------------------
MANIFEST = "manifest.json"
VERSION = 1


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
        """Record shard ``name`` (relative to the folder) as finished, with ``info``."""
        if self.stamp:
            stat = (self.path.parent / name).stat()
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

    def forget(self) -> None:
        """Start over: no shard counts as finished."""
        self.shards, self.complete = {}, False
        self.save()
