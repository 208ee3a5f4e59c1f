"""The types of a manifest's fields, checked when it is read.

A manifest is JSON a user can edit, so a field of the wrong type must not read as "no check": a shard
entry set to ``5`` used to switch off every check of that shard, and ``"complete": "true"`` (text) read
as an unfinished collection. ``check_fields`` refuses such a file in one line naming the file and the
field. Fields not named here are left alone (a later release may add some); a field that is absent
is accepted as before (a folder written by an older release records fewer).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from trajectories.schema import SchemaError

HEX64 = re.compile(r"[0-9a-f]{64}")


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


ENTRY_FIELDS = {
    "rows": (_count, "a whole number >= 0"),
    "count": (_count, "a whole number >= 0"),
    "first": (_count, "a whole number >= 0"),
    "human_calls": (_count, "a whole number >= 0"),
    "size": (_count, "a whole number >= 0"),
    "mtime_ns": (_count, "a whole number >= 0"),
    "episodes": (lambda v: isinstance(v, list) and all(isinstance(e, str) for e in v), "a list of episode ids"),
    "sha256": (lambda v: isinstance(v, str) and HEX64.fullmatch(v) is not None, "64 hex digits"),
    "prm": (lambda v: isinstance(v, str) and bool(v), "a PRM fingerprint (text)"),
    "pending": (lambda v: isinstance(v, bool), "true or false"),
}
"""What a shard's entry may record, with the check and its wording."""


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_fields(path: Path, data: dict) -> None:
    """Refuse (``SchemaError``, one line naming ``path`` and the field) a manifest field of the wrong type."""
    redo = ("the file was edited or mixed: restore it, or delete the folder and rerun the command that wrote it")
    if "complete" in data and not isinstance(data["complete"], bool):
        raise SchemaError(f"{path}: complete={_shown(data['complete'])} is not true or false (a JSON boolean, not "
                          f"text or a number); {redo}.")
    if "config" in data and not isinstance(data["config"], dict):
        raise SchemaError(f"{path}: config={_shown(data['config'])} is not an object of settings; {redo}.")
    config = data.get("config")
    if isinstance(config, dict) and config.get("budget") is not None:  # a budget of text switched its check off
        budget = config["budget"]
        whole = isinstance(budget, int) and not isinstance(budget, bool)
        priced = "helps" in config and isinstance(budget, float) and math.isfinite(budget)  # spent in cost units
        if not (whole or priced) or budget < 0:
            raise SchemaError(f"{path}: config.budget={_shown(budget)}, expected a whole number >= 0; {redo}.")
    for name, entry in data.get("shards", {}).items():
        if not isinstance(entry, dict):
            raise SchemaError(f"{path}: shards[{name!r}]={_shown(entry)} is not an object of what was recorded for "
                              f"the shard; {redo}.")
        for field, value in entry.items():
            check, wanted = ENTRY_FIELDS.get(field, (None, ""))
            if check is not None and not check(value):
                raise SchemaError(f"{path}: shards[{name!r}].{field}={_shown(value)}, expected {wanted}; {redo}.")
