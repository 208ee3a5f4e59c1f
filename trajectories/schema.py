"""The offline dataset's columns and the rules a frame of them must keep.

- ``SCHEMA``: the columns every collected shard has, with their types; ``OPTIONAL``: the columns
  later stages (or counterfactual, proposal collection) add, typed when present.
- ``validate(frame, source, require)``: every column in ``require`` (default: ``SCHEMA``) must be
  there, without nulls; every known column present (``ALL_COLUMNS``) must have its type. Integer
  columns accept any integer width, number columns any integer or float (widened, never
  narrowed); nothing is converted from text (a ``step`` stored as strings is refused, with the
  file and the column named) except ``features`` and ``proposal_signals`` written as JSON text
  by older runs, read as the typed map they are now (``trajectories.number_maps``).
- ``check_episodes``: every episode holds steps 0..n-1 exactly once (for readers of whole episodes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import polars as pl

from trajectories.number_maps import NUMBER_MAP, NUMBER_MAP_COLUMNS, NumberMapError, as_number_map

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
    "features": NUMBER_MAP,
    "cf_base_success": pl.Float64,
    "cf_intervene_success": pl.Float64,
    "proposal_text": pl.String,
    "proposal_reward": pl.Float64,
    "proposal_signals": NUMBER_MAP,
    "help_kind": pl.String,
    "help_cost": pl.Float64,
}
"""Columns added by later stages or by counterfactual collection; typed when present.

``proposal_text`` / ``proposal_reward`` / ``proposal_signals`` hold, at every decision point, what
the base agent proposed, that proposal's immediate reward and the agent's numbers about it (a map
of names to numbers), also where an intervention replaced it (``collect-offline-trajectories
--decide-after proposal``); a dataset collected before them, or in ``state`` mode, reads as
``PROPOSAL_DEFAULTS``.

``features`` holds the observation's numeric side information (a map of names to numbers).
``features`` and ``proposal_signals`` are ``NUMBER_MAP`` columns (``trajectories.number_maps``: each
cell a list of ``{key, value}`` entries); shards written as JSON text before are converted on read.
``cf_*_success`` hold the counterfactual outcomes (base acts / intervention here, then the
same continuation policy) recorded by ``collect-offline-trajectories --counterfactual``.
``help_kind`` / ``help_cost`` (tiered help): which kind of help an intervention called and what it cost,
``""`` and 0 where the agent acted; written by a collection with several kinds (``--help-kinds``). A dataset without
them is one kind, the strong actor's, at price 1 (``with_help_defaults``; ``trajectories.helps``).
"""

HELP_COLUMNS = ("help_kind", "help_cost")

ALL_COLUMNS = {**SCHEMA, **OPTIONAL}

PROPOSAL_DEFAULTS: dict[str, Any] = {"proposal_text": "", "proposal_reward": None, "proposal_signals": []}
"""The proposal columns of a row with no proposal logged (``state`` mode, or an older dataset); ``[]``
is the empty map."""
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
    try:
        # Converted first: older shards hold these as JSON text.
        maps = [as_number_map(frame[name], str(source)) for name in NUMBER_MAP_COLUMNS if name in frame.columns]
    except NumberMapError as error:
        raise SchemaError(str(error)) from None
    frame = frame.with_columns(maps) if maps else frame
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
    _check_help(frame, source)
    for name, low in (("step", 0), ("budget_left", 0), ("horizon", 1)):
        if name in frame.columns and frame.height and (smallest := frame[name].min()) is not None and smallest < low:
            raise SchemaError(f"{source}: column {name!r} holds {smallest}; every {name} must be >= {low}.")
    return frame


def _check_help(frame: pl.DataFrame, source) -> None:
    """A row calls a kind exactly when it intervened, at a finite price >= 0; the agent's own rows cost nothing.
    Nulls are refused: ``""`` and 0 say "the agent acted", so a lost value never reads as the agent."""
    present = [name for name in HELP_COLUMNS if name in frame.columns]
    for name in present:
        if nulls := frame[name].null_count():
            raise SchemaError(f"{source}: column {name!r} has {nulls} null values; write \"\" and 0 where the agent "
                              "acted.")
    if "help_cost" in present:
        cost = frame["help_cost"]
        if (~cost.is_finite()).any() or (cost < 0).any():
            bad = cost.filter(~cost.is_finite() | (cost < 0))[0]
            raise SchemaError(f"{source}: column 'help_cost' holds {bad}; a call's cost is a finite number >= 0.")
    if "help_kind" not in present:
        return
    called = frame["help_kind"] != ""
    if "intervened" in frame.columns and (wrong := frame.filter(called != frame["intervened"])).height:
        row = wrong.row(0, named=True)
        raise SchemaError(f"{source}: column 'help_kind' is {row['help_kind']!r} on a row with intervened="
                          f"{row['intervened']} ({wrong.height} such rows); a row names a kind exactly when it "
                          "intervened.")
    if "help_cost" in present and (free := frame.filter(~called & (frame["help_cost"] != 0))).height:
        raise SchemaError(f"{source}: column 'help_cost' is {free['help_cost'][0]} on a row that called no help "
                          f"({free.height} such rows); the agent's own action costs 0.")


def with_help_defaults(frame: pl.DataFrame, kind: str, price: float = 1.0) -> pl.DataFrame:
    """``frame`` with the help columns; a frame of one kind (an older or one-kind collection, none of them) gets
    ``kind`` at ``price`` on its interventions, ``""`` and 0 elsewhere."""
    if "intervened" not in frame.columns:
        raise SchemaError("a frame without 'intervened' cannot be read as one kind of help")
    called = pl.col("intervened")
    missing = {"help_kind": pl.when(called).then(pl.lit(str(kind))).otherwise(pl.lit("")),
               "help_cost": pl.when(called).then(pl.lit(float(price))).otherwise(pl.lit(0.0))}
    return frame.with_columns(value.alias(name) for name, value in missing.items() if name not in frame.columns)


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
