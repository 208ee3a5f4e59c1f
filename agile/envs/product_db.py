"""The product table of one ProductQA group, and the ``[SearchProduct]`` tool's query runner.

``ProductDB(group)`` builds an in-memory SQLite table named after the group folder (the gold SQL
reads ``SELECT product_id FROM `blades` WHERE ...``) with one row per product:

- ``product_id`` (the asin) and ``title``;
- one column per feature, named as in ``schema.json`` (quote names with spaces), plus any feature
  that ``metadata.json`` carries but the schema omits (``camera_cases`` lists ``portability`` in
  its schema while its products and its gold SQL use ``pockets``);
- a feature whose non-missing values all parse as numbers is ``REAL`` (``price < 20``,
  ``ORDER BY size`` compare numbers, not strings); the others are ``TEXT COLLATE NOCASE``, so
  ``material = "Plastic"`` matches ``plastic`` as the MySQL-style gold SQL expects. A quoted
  literal still works against a REAL column (``filter_size = "67"``): SQLite applies the
  column's numeric affinity to it.
- HTML entities in text (``&quot;``, ``&amp;``) are decoded so the agent reads plain titles;
  missing values are NULL.

``query`` runs one SELECT and returns the first column of each row as strings; anything else is
refused, and a bad query raises ``SQLError`` whose message (SQLite's own) is what the agent sees
as tool output.
"""

from __future__ import annotations

import html
import re
import sqlite3
import threading
from typing import Any

from agile.envs.productqa import ProductGroup

_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")
# SQLite calls the progress handler every _STEP virtual-machine instructions; a query that runs
# past _MAX_STEPS of them is stopped, so a runaway self-join from an agent cannot hang a rollout.
_STEP = 1000
_MAX_STEPS = 5_000_000
_SHOWN_VALUES = 12


class SQLError(ValueError):
    """A query the product table refused or SQLite could not run; ``str()`` is for the agent."""

    def __init__(self, message: str, sql: str = ""):
        super().__init__(message)
        self.message = message
        self.sql = sql


class ProductDB:
    """An in-memory, read-only SQLite table of one group's products."""

    def __init__(self, group: ProductGroup):
        self.group = group
        self.table = group.name
        self.columns = _feature_columns(group)  # [(name, "REAL" | "TEXT")]
        self._con = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()  # one connection, possibly shared by rollout threads
        self._steps = 0
        self._create()
        self._con.execute("PRAGMA query_only = ON")  # the table is built; nothing may change it
        self._con.set_progress_handler(self._progress, _STEP)

    def __reduce__(self):
        # A SQLite connection cannot be pickled; rebuild from the group in the other process.
        return (ProductDB, (self.group,))

    def query(self, sql: str, limit: int | None = None) -> list[str]:
        """Run one SELECT; return the first column of each row (the product ids) as strings.

        ``limit`` caps the rows returned. Raises ``SQLError`` for anything but a single SELECT,
        or with SQLite's message when the query does not run.
        """
        if not isinstance(sql, str) or not sql.strip():
            raise SQLError("SQL error: empty query; write one SELECT statement.", str(sql))
        first = _first_keyword(sql)
        if first != "SELECT":
            got = first or "nothing"
            raise SQLError(f"SQL error: only SELECT queries are allowed (got {got!r}).", sql)
        with self._lock:
            self._steps = 0
            try:
                cur = self._con.execute(sql)
                rows = cur.fetchall() if limit is None else cur.fetchmany(max(int(limit), 0))
            except sqlite3.OperationalError as e:
                if str(e) == "interrupted":
                    raise SQLError("SQL error: query stopped, it ran too long; simplify it.",
                                   sql) from e
                raise SQLError(_explain(str(e), self.table, self.columns), sql) from e
            except (sqlite3.Error, sqlite3.Warning) as e:  # e.g. two statements at once
                raise SQLError(f"SQL error: {e}", sql) from e
        return [str(r[0]) for r in rows if r and r[0] is not None]

    def schema_text(self) -> str:
        """A compact description of the table for a prompt: columns, types, units, values."""
        lines = [f"Table `{self.table}` ({len(self.group.metadata)} products). Columns:",
                 "product_id TEXT -- the product's asin", "title TEXT"]
        with self._lock:
            for name, kind in self.columns:
                self._steps = 0  # each query its own allowance (a query stopped before left the count past it)
                spec = self.group.schema.get(name, {})
                bare = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
                note = self._describe(name, kind, spec)
                lines.append(f"{name if bare else _ident(name)} {kind}"
                             + (f" -- {note}" if note else ""))
        return "\n".join(lines)

    def text_values(self) -> list[tuple[str, list[str]]]:
        """Each TEXT column with the values that occur in it, most frequent first (what a query
        may compare it with; ``agile.executor.sql_grammar`` builds its conditions from them)."""
        out = []
        with self._lock:
            for name, kind in self.columns:
                if kind == "TEXT":
                    self._steps = 0
                    col = _ident(name)
                    out.append((name, [v for (v,) in self._con.execute(
                        f"SELECT {col} FROM {_ident(self.table)} WHERE {col} IS NOT NULL "
                        f"GROUP BY {col} ORDER BY COUNT(*) DESC, {col}")]))
        return out

    def real_columns(self) -> list[str]:
        """The numeric columns (a query may order by them)."""
        return [name for name, kind in self.columns if kind == "REAL"]

    def close(self) -> None:
        self._con.close()

    # -- building ---------------------------------------------------------------------------

    def _create(self) -> None:
        cols = ", ".join(f"{_ident(n)} {'REAL' if k == 'REAL' else 'TEXT COLLATE NOCASE'}"
                         for n, k in self.columns)
        self._con.execute(f"CREATE TABLE {_ident(self.table)} (product_id TEXT PRIMARY KEY, "
                          f"title TEXT COLLATE NOCASE{', ' + cols if cols else ''})")
        marks = ", ".join("?" * (len(self.columns) + 2))
        rows = [[asin, html.unescape(p["title"])] + [_cell(p.get(n), k) for n, k in self.columns]
                for asin, p in self.group.metadata.items()]
        self._con.executemany(f"INSERT INTO {_ident(self.table)} VALUES ({marks})", rows)
        self._con.commit()

    def _progress(self) -> int:
        self._steps += _STEP
        return 1 if self._steps > _MAX_STEPS else 0

    def _describe(self, name: str, kind: str, spec: dict) -> str:
        col = _ident(name)
        if kind == "REAL":
            lo, hi = self._con.execute(f"SELECT MIN({col}), MAX({col}) FROM {_ident(self.table)}"
                                       ).fetchone()
            unit = spec.get("unit")
            return f"{_fmt(lo)} to {_fmt(hi)}" + (f" {unit}" if unit else "")
        # The values that occur, not schema.json's choices: the two disagree in the real data
        # (camera_lenses focus_type holds "Auto", its schema lists "Auto Focus").
        values = [v for (v,) in self._con.execute(
            f"SELECT {col} FROM {_ident(self.table)} WHERE {col} IS NOT NULL "
            f"GROUP BY {col} ORDER BY COUNT(*) DESC, {col}")]
        shown = ", ".join(values[:_SHOWN_VALUES]) + (", ..." if len(values) > _SHOWN_VALUES else "")
        return f"values: {shown}" if values else "no values"


def _feature_columns(group: ProductGroup) -> list[tuple[str, str]]:
    names = [n for n in group.schema if n not in ("product_id", "title")]
    for product in group.metadata.values():
        names += [k for k in product if k not in ("product_id", "title") and k not in names]
    seen: dict[str, str] = {}
    for n in names:
        if n.lower() in seen:  # SQLite column names ignore case
            raise ValueError(f"group {group.name!r}: features {seen[n.lower()]!r} and {n!r} differ "
                             f"only in case, which one SQLite table cannot hold; rename one.")
        seen[n.lower()] = n
    columns = []
    for n in names:
        values = [p.get(n) for p in group.metadata.values() if p.get(n) not in (None, "")]
        numeric = bool(values) and all(isinstance(v, (int, float)) or
                                       (isinstance(v, str) and _NUMBER.fullmatch(v.strip()))
                                       for v in values)
        # choice features stay TEXT even when numeric-looking ("num_per_pack": "1"): gold SQL
        # compares them to quoted strings, and TEXT keeps "1" = "1" exact.
        is_choice = group.schema.get(n, {}).get("type") == "choice"
        columns.append((n, "REAL" if numeric and not is_choice else "TEXT"))
    return columns


def _cell(value: Any, kind: str) -> Any:
    if value is None or value == "":
        return None
    if kind == "REAL":
        return float(value)
    return html.unescape(str(value))


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fmt(x: float | None) -> str:
    return "?" if x is None else (f"{x:g}")


def _first_keyword(sql: str) -> str:
    # Skip comments and opening parentheses so "(SELECT ...)" and "-- note\nSELECT" pass.
    s = sql
    while True:
        s = s.lstrip().lstrip("(")
        if s.startswith("--"):
            s = s.split("\n", 1)[1] if "\n" in s else ""
        elif s.startswith("/*"):
            s = s.split("*/", 1)[1] if "*/" in s else ""
        else:
            break
    m = re.match(r"[A-Za-z]+", s.lstrip())
    return m.group(0).upper() if m else ""


def _explain(message: str, table: str, columns: list[tuple[str, str]]) -> str:
    text = f"SQL error: {message}"
    if message.startswith("no such column"):
        text += ". Columns: product_id, title, " + ", ".join(n for n, _ in columns)
    elif message.startswith("no such table"):
        text += f". The table is `{table}`"
    return text
