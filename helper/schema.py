"""The offline dataset's schema and shard I/O, under the import path helper code has always used.

The one implementation is ``agile.dataset`` (it lives there so that ``prm``, which may import only
``agile``, reads and writes shards through the same code); this module re-exports it, plus the
JSON reader of saved helper components.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agile.dataset import (
    ALL_COLUMNS,
    OPTIONAL,
    PROPOSAL_DEFAULTS,
    SCHEMA,
    EmptyDataset,
    SchemaError,
    check_episodes,
    decide_after_of,
    empty_frame,
    read_shard,
    read_trajectories,
    shard_paths,
    validate,
    with_proposal_defaults,
    write_atomic,
    write_json_atomic,
    write_shard,
)

__all__ = [
    "ALL_COLUMNS", "OPTIONAL", "PROPOSAL_DEFAULTS", "SCHEMA", "EmptyDataset", "SchemaError", "check_episodes",
    "decide_after_of", "empty_frame", "read_kind_json", "read_shard", "read_trajectories", "shard_paths",
    "validate", "with_proposal_defaults", "write_atomic", "write_json_atomic", "write_shard",
]


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
