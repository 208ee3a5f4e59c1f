"""Files written whole or not at all, their content hashes, and JSON objects read back with a one-line refusal.

Writes go to a temp file in the same folder, fsynced, then renamed over the target: a reader sees
the old file or the new one, never half of one. ``sha256_of``: a file's content address, which the
manifests record for each shard (``trajectories.content``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


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


def sha256_of(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file's bytes, read in blocks (a shard may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
