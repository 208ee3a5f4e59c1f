"""The queries constrained decoding writes: conditions on the table's own columns and values.

    SELECT product_id FROM `<table>` WHERE <condition> [AND <condition>]... <ending>

A condition is ``<column> = '<value>'`` with a TEXT column and a value that occurs in it (the
table's own, ``ProductDB.text_values``); an ending is ``;``, `` LIMIT 1;`` or `` ORDER BY
<numeric column> ASC|DESC LIMIT 1;``. Every query the grammar allows runs and compares with values
that exist, so a search can fail only by choosing the wrong condition, never by its syntax (the
free-written ``WHERE`` of SmolLM2-135M failed to run in 15 of 16 shared test sessions).

The grammar offers choices; ``agile.executor.constrained`` picks among them by the model's
log-probability, one unit at a time (column, then value, then AND or an ending).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_VALUES = 32
"""Values offered per column, most frequent first (a column with hundreds costs a forward pass each)."""
MAX_CONDITIONS = 3
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def column(name: str) -> str:
    """A column as SQL names it: bare when it can be, else double-quoted."""
    return name if _BARE.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """A string literal (single quotes: a double-quoted word could name a column)."""
    return "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True)
class SQLGrammar:
    table: str
    text_values: tuple[tuple[str, tuple[str, ...]], ...]
    """(column, values that occur in it), the columns a condition may test."""
    numeric: tuple[str, ...] = ()
    """Columns an ending may order by."""

    @classmethod
    def of(cls, db) -> "SQLGrammar":
        """The grammar of a ``ProductDB``'s table."""
        return cls(db.table, tuple((name, tuple(values[:MAX_VALUES])) for name, values in db.text_values() if values),
                   tuple(db.real_columns()))

    def prefix(self) -> str:
        return f"SELECT product_id FROM `{self.table}` WHERE"

    def columns(self, used: set[str]) -> list[str]:
        """Candidate column units (`` <column> =``) not tested yet."""
        return [f" {column(name)} =" for name, _ in self.text_values if name not in used]

    def name_of(self, unit: str) -> str:
        """The column a unit from ``columns`` tests."""
        for name, _ in self.text_values:
            if unit == f" {column(name)} =":
                return name
        raise KeyError(unit)

    def values(self, name: str) -> list[str]:
        """Candidate value units (`` '<value>'``) of one column."""
        return [f" {literal(v)}" for n, values in self.text_values if n == name for v in values]

    def endings(self) -> list[str]:
        out = [";", " LIMIT 1;"]
        for name in self.numeric:
            out += [f" ORDER BY {column(name)} ASC LIMIT 1;", f" ORDER BY {column(name)} DESC LIMIT 1;"]
        return out
