"""Content addresses: each shard's SHA-256, recorded by the manifests that list it, checked by every reader.

A manifest lists a shard with the ``sha256`` of its bytes once it is written (``Manifest.mark_done``,
``trajectories.shards.mark_complete``), as DVC and Hugging Face datasets keep a manifest of hashes.
``check_content`` refuses, naming the file, a shard whose bytes are none that a manifest of its folder
recorded: another run's shard copied over one of ours (same name, same episode ids), or an edited shard.
A shard scored in place has two records (``manifest.json`` as collected, ``prm_score.manifest.json`` as
scored): either is its own. A shard ``prm score`` marked pending (a kill while it rewrote the shard) may
hold either its old or its new bytes, so it is not compared here; a reader of scores refuses it
(``trajectories.scored_by``) and a rerun of that prm score rewrites it. A shard no manifest records a hash
for (a folder written by an older release) is read as before: there is nothing to compare.

``collection_id``: one hash of a collection's listed shards, recorded by ``prm score`` in its output to tell
this collection's output from another's (``trajectories.outputs``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from trajectories.files import sha256_of
from trajectories.manifest import MANIFEST, SCORE_MANIFEST, load_manifest
from trajectories.schema import SchemaError


def recorded(data: Path) -> dict[str, tuple[set[str] | None, Path]]:
    """Per shard (its name relative to ``data``): the hashes the folder's manifests recorded for it and the
    last manifest naming one; None for a shard marked pending (either content may be there)."""
    found: dict[str, tuple[set[str] | None, Path]] = {}
    for name in (MANIFEST, SCORE_MANIFEST):
        path = data / name
        if not path.is_file():
            continue
        for shard, entry in load_manifest(path).get("shards", {}).items():
            hashes = found.get(shard, (set(), path))[0]
            if entry.get("pending"):
                found[shard] = (None, path)
            elif hashes is not None and entry.get("sha256"):
                found[shard] = (hashes | {entry["sha256"]}, path)
    return found


def check_content(data: Path, paths: Iterable[Path]) -> None:
    """Refuse (``SchemaError``, one line naming the shard) a shard of ``data`` whose SHA-256 no manifest of
    the folder recorded for it."""
    known = recorded(data)
    for path in paths:
        hashes, manifest = known.get(path.relative_to(data).as_posix(), (None, None))
        if not hashes:
            continue
        found = sha256_of(path)
        if found not in hashes:
            wanted = " or ".join(sorted(h[:12] + "…" for h in hashes))
            raise SchemaError(f"{path}: its bytes (sha256 {found[:12]}…) are not the shard {manifest} recorded "
                              f"(sha256 {wanted}): a shard of another run copied over it, or an edited one; restore "
                              f"it, or delete it and rerun the command that wrote {data} to re-create it.")


def collection_id(data: Path) -> str | None:
    """A hash of the shards ``data``'s ``manifest.json`` lists, with what it recorded of each (their hashes:
    the same for the same collection wherever it lies); None without a manifest."""
    path = data / MANIFEST
    if not data.is_dir() or not path.is_file():
        return None
    shards = load_manifest(path).get("shards", {})
    return hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()[:16]
