"""Numbers by name, one mapping per row: the ``features`` and ``proposal_signals`` columns.

Their keys vary per environment and per row and their values are numbers, so each cell is a map
in Arrow's map layout: a list of ``{key, value}`` entries (``NUMBER_MAP``), keys unique and sorted,
``[]`` for a row with no numbers. A list of entries rather than a struct with a field per key:
one type for every environment, so shards of different environments (or a key that appears later
in a run) concatenate without a schema of their own. Not polars' own ``pl.Map``: it exists from
polars 2.0 only (the project allows 1.x); it is this same layout, and a file written with it (any
Parquet MAP) is read as ``NUMBER_MAP``.

This module is the one place that turns such a column into per-row dicts (``number_maps``) and
back (``number_map_column``; one cell: ``entries`` and ``mapping``), and the one place that reads
the layout before it: shards written before typed columns hold each mapping as JSON text
(``'{"margin": 0.3}'``). ``as_number_map`` converts those on read (``trajectories.schema.validate``
calls it for every shard read or written), so a reader never sees the difference.

What a value may be: a number (a bool counts as 0 or 1). NaN is kept and means missing, for every
reader (the helper's classifier imputes it; the PRM flags it missing), as a JSON ``NaN`` did
before; a null value is the same as an absent key (dropped). An infinity is refused: it is a bug
upstream, as in every other number column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

NUMBER_MAP: pl.DataType = pl.List(pl.Struct({"key": pl.String, "value": pl.Float64}))
"""The type of a column of per-row numbers by name (Arrow's map layout, as polars reads it)."""
NUMBER_MAP_COLUMNS = ("features", "proposal_signals")
"""The dataset's columns of this type."""

_REDO = "fix or drop that row, or re-create the shard with collect-offline-trajectories"


class NumberMapError(ValueError):
    """A cell that is not a mapping of names to numbers; the message names where, the column and
    what to do (``trajectories.schema.SchemaError`` is raised for it when a shard is validated)."""


def _number(value: Any, column: str, key: str) -> float | None:
    """``value`` as a float (None stays None: an absent number), or ``NumberMapError``."""
    if value is None:
        return None
    if isinstance(value, (int, float)):  # bool is an int: True is 1.0, as float(True) always gave
        return float(value)
    raise NumberMapError(f"{column}: key {key!r} holds {value!r} ({type(value).__name__}); its values must be "
                         "numbers (NaN for a missing one).")


def _pairs(mapping: Mapping[str, Any], column: str) -> list[tuple[str, float]]:
    """``(key, number)`` of ``mapping`` sorted by key, a null value left out."""
    numbers = {str(key): _number(value, column, str(key)) for key, value in mapping.items()}
    return [(key, numbers[key]) for key in sorted(numbers) if numbers[key] is not None]


def entries(mapping: Mapping[str, Any] | None, column: str = "numbers") -> list[dict[str, Any]] | None:
    """One row's mapping in the column's form: ``{key, value}`` entries sorted by key, a null value
    left out; None stays None (no mapping logged)."""
    if mapping is None:
        return None
    return [{"key": key, "value": value} for key, value in _pairs(mapping, column)]


def mapping(cell: list[dict[str, Any]] | None) -> dict[str, float]:
    """One cell of the column's form back as a dict of numbers (``{}`` for null; a null value left out)."""
    return {} if cell is None else {entry["key"]: entry["value"] for entry in cell if entry["value"] is not None}


def number_map_column(name: str, mappings: Iterable[Mapping[str, Any] | None]) -> pl.Series:
    """A ``NUMBER_MAP`` column named ``name`` holding ``mappings`` (dicts of numbers; None: null)."""
    nulls, rows, keys, values = [], [], [], []
    for row, one in enumerate(mappings):
        nulls.append(one is None)
        for key, value in _pairs(one or {}, name):
            rows.append(row)
            keys.append(key)
            values.append(value)
    return _assemble(name, nulls, rows, keys, values)


def number_maps(column: pl.Series, source: str = "<frame>") -> list[dict[str, float]]:
    """Every row of ``column`` as a dict of numbers, in row order (``{}`` for a null row).

    ``column`` may be in any layout ``as_number_map`` reads (old JSON text included); ``source``
    names it in a refusal."""
    typed = as_number_map(column, source)
    maps: list[dict[str, float]] = [{} for _ in range(typed.len())]
    found = _flat(typed)
    for row, key, value in zip(found["row"].to_list(), found["key"].to_list(), found["value"].to_list()):
        if value is not None:
            maps[row][key] = value
    return maps


def number_map_keys(column: pl.Series, source: str = "<frame>") -> list[str]:
    """The keys that the rows of ``column`` hold a number for, sorted."""
    found = _flat(as_number_map(column, source))
    return found.filter(pl.col("value").is_not_null())["key"].unique().sort().to_list()


def _flat(column: pl.Series) -> pl.DataFrame:
    """Every entry of ``column`` (``NUMBER_MAP``) as a row ``(row, key, value)``, in order."""
    # Column by column: polars builds and reads flat columns far faster than nested Python values.
    return (pl.DataFrame({"cell": column}).with_row_index("row").explode("cell").drop_nulls("cell")
            .unnest("cell"))


def _assemble(name: str, nulls: list[bool], rows: list[int], keys: list[str], values: list[float]) -> pl.Series:
    """The ``NUMBER_MAP`` column whose row ``r`` holds the entries at ``r`` in ``rows`` (null where
    ``nulls[r]``, ``[]`` where it has none): the inverse of ``_flat``."""
    flat = pl.DataFrame({"row": rows, "key": keys, "value": values},
                        schema={"row": pl.Int64, "key": pl.String, "value": pl.Float64})
    cells = flat.group_by("row", maintain_order=True).agg(pl.struct("key", "value").alias(name))
    table = (pl.DataFrame({"row": range(len(nulls)), "null": nulls}, schema={"row": pl.Int64, "null": pl.Boolean})
             .join(cells, on="row", how="left").sort("row"))
    empty = pl.lit([], dtype=NUMBER_MAP)
    return table.select(pl.when(pl.col("null")).then(None).otherwise(pl.col(name).fill_null(empty))
                        .cast(NUMBER_MAP).alias(name)).to_series()


def as_number_map(column: pl.Series, source: str = "<frame>") -> pl.Series:
    """``column`` as ``NUMBER_MAP``, or ``NumberMapError`` in one line naming ``source``, the column
    and what to do.

    Read: ``NUMBER_MAP``; any list of ``{key: String, value: <number>}`` structs or Parquet MAP of
    strings to numbers (values widened to Float64); an all-null column; and JSON text, the layout
    before typed columns (each cell a JSON object of numbers, or null or ``""`` for none)."""
    name = column.name
    dtype = column.dtype
    if dtype == pl.String:
        column = _from_json_text(column, source)
    elif dtype != NUMBER_MAP:
        if not _castable(dtype):
            raise NumberMapError(f"{source}: column {name!r} has type {dtype}, expected a map of names to numbers "
                                 f"({NUMBER_MAP}); write it with trajectories.rows.frame_of or "
                                 "trajectories.number_maps.number_map_column, or re-create the shard.")
        column = column.cast(NUMBER_MAP)
    _check(column, source)
    return column


def _castable(dtype: pl.DataType) -> bool:
    """Whether ``dtype`` is this layout with other (numeric) value types: a lossless cast."""
    if dtype == pl.Null:
        return True
    map_type = getattr(pl, "Map", None)  # polars >= 2.0 reads a Parquet MAP as pl.Map
    if map_type is not None and isinstance(dtype, map_type):
        return dtype.key == pl.String and (dtype.value.is_numeric() or dtype.value == pl.Null)
    if not isinstance(dtype, pl.List):
        return False
    inner = dtype.inner
    if inner == pl.Null:  # lists that are all empty
        return True
    if not isinstance(inner, pl.Struct) or [f.name for f in inner.fields] != ["key", "value"]:
        return False
    key, value = (f.dtype for f in inner.fields)
    return key == pl.String and (value.is_numeric() or value in (pl.Boolean, pl.Null))


def _from_json_text(column: pl.Series, source: str) -> pl.Series:
    """A column of JSON objects (the layout before typed columns) as ``NUMBER_MAP``."""
    name = column.name
    nulls, rows, keys, values = [], [], [], []
    for row, text in enumerate(column.to_list()):
        nulls.append(text is None)
        if text is None or not text.strip():
            continue
        try:
            value = json.loads(text)  # Python's reader takes the NaN that json.dumps wrote for a NaN
            if not isinstance(value, dict):
                raise NumberMapError("not an object")
            pairs = _pairs(value, name)
        except (json.JSONDecodeError, NumberMapError):
            raise NumberMapError(
                f"{source}: column {name!r} row {row} is {text[:60]!r}, not a JSON object of numbers (the "
                f"layout of shards written before typed columns); {_REDO}.") from None
        for key, number in pairs:
            rows.append(row)
            keys.append(key)
            values.append(number)
    return _assemble(name, nulls, rows, keys, values)


def _check(column: pl.Series, source: str) -> None:
    """Keys present and unique within a row; values finite or NaN (missing)."""
    name = column.name
    found = _flat(column)
    if found.is_empty():
        return
    bad = found.filter(pl.col("key").is_null())
    if bad.height:
        raise NumberMapError(f"{source}: column {name!r} row {bad['row'][0]} has an entry without a key; {_REDO}.")
    bad = found.filter(pl.col("value").is_infinite())
    if bad.height:
        row, key, value = bad.row(0)
        raise NumberMapError(f"{source}: column {name!r} row {row} holds {key!r}: {value}; its numbers must be "
                             f"finite (NaN marks a missing one): {_REDO}.")
    twice = found.filter(pl.struct("row", "key").is_duplicated())
    if twice.height:
        row, key, _ = twice.row(0)
        raise NumberMapError(f"{source}: column {name!r} row {row} holds key {key!r} twice; keys of a row are "
                             f"unique: {_REDO}.")
