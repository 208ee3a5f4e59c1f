"""A saved PRM's fingerprint: a hash of the files that decide its scores.

``prm_fingerprint(folder)`` is ``sha256:<hex>`` over ``prm_config.json``, the head, the calibration map,
the adapter and a saved backbone (names, sizes, contents); metrics, plots and out-of-fold tables do not
count. Two copies of one PRM share it wherever they lie; a retrained or replaced PRM does not. ``prm score``
records it for every shard it scores (``trajectories.scored_by``) and a helper folder for the PRM it was
distilled with (``helper.gates.identity``).

A file of at most ``FULL_HASH_BYTES`` is hashed whole; a larger one (a saved backbone's weights) by its size
and its first and last MiB, so a check never reads gigabytes: a retrained or replaced backbone changes those
(its header and its last tensors), while rehashing all of it would cost seconds on every start.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

FULL_HASH_BYTES = 64 << 20
EDGE_BYTES = 1 << 20
PRM_FILES = ("prm_config.json", "head.safetensors", "calibration.json")
"""The PRM files that decide its scores (with the folders below)."""
PRM_FOLDERS = ("adapter", "backbone")


def prm_fingerprint(directory: str | Path) -> str:
    """``sha256:<hex>`` over the PRM folder's score-deciding files (names, sizes, contents)."""
    directory = Path(directory)
    files = [directory / name for name in PRM_FILES if (directory / name).is_file()]
    for folder in PRM_FOLDERS:
        if (directory / folder).is_dir():
            files += sorted(p for p in (directory / folder).rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(directory).as_posix()}\0{size}\0".encode())
        add_contents(digest, path, size)
    return "sha256:" + digest.hexdigest()


def add_contents(digest, path: Path, size: int) -> None:
    """Feed ``path``'s bytes to ``digest``: all of them up to ``FULL_HASH_BYTES``, else its first and last MiB."""
    with path.open("rb") as handle:
        if size <= FULL_HASH_BYTES:
            digest.update(handle.read())
        else:
            digest.update(handle.read(EDGE_BYTES))
            handle.seek(size - EDGE_BYTES)
            digest.update(handle.read(EDGE_BYTES))
