"""Hashes of a run folder's files, less what legitimately differs between two runs of the same settings.

    python benchmarks/trust/run_hashes.py runs/a                 # one sha256 per file, and one for the folder
    python benchmarks/trust/run_hashes.py runs/a runs/b          # and which files differ

A change that should not change behaviour (a rename, a move) is checked by running the same command on the
same seed before and after it and comparing the two folders here. What is left out, and why:

- ``provenance.json`` (command line, commit, machine, start times, wall times), the ``seconds`` of every
  stage's ``.done`` and of ``prm/metrics.json``, and the sweep's ``method_seconds``: when and where a run ran, not
  what it computed.
- ``mtime_ns``, and in ``trajectories/prm_score.manifest.json`` the ``model`` key of an older release (the PRM
  files' modification times and folder path) and the PRM fingerprint ``prm`` (it hashes ``prm_config.json``,
  which may name a path of the run).
- ``solve/solve.json``'s raw SHA-256 of each file it wrote, and their ``fingerprint``: ``solution.json`` records
  the run's path; ``helper.json``'s ``classifier_files`` (the raw SHA-256 of ``.skops`` files, whose ids differ):
  each of those files is compared here on its own, as below.
- the run folder's own path, wherever a file records it, is written ``<run>``: two runs need two folders.
- inside zip files (``.npz``, ``.skops``): the members' timestamps; for ``.skops`` also the ``id()`` numbers
  that name its members and nodes, renumbered in the order they appear (they are memory addresses).

Everything else counts byte for byte: Parquet shards and labels, CSV tables, safetensors, the plot.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path

TIMING_KEYS = {"seconds", "started", "mtime_ns", "method_seconds"}
"""JSON keys that record when a run ran or how long it took."""
LEFT_OUT = {"provenance.json"}
"""Files that record only where and when a run ran (command, commit, machine, times)."""
DERIVED_KEYS = {"prm_score.manifest.json": {"model", "prm"}, "solve.json": {"files", "fingerprint"},
                "helper.json": {"classifier_files"}}
"""Keys, by file name, that hash paths or modification times, or hash the run's other files."""


def _drop_timing(value, derived=frozenset()):
    """``value`` less the timing keys, with the ``derived`` keys' values (at any depth) written ``<derived>``."""
    if isinstance(value, dict):
        return {k: "<derived>" if k in derived else _drop_timing(v, derived)
                for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_drop_timing(v, derived) for v in value]
    return value


def _json_bytes(data: bytes, run: Path, name: str) -> bytes:
    text = data.decode().replace(str(run.resolve()), "<run>").replace(str(run), "<run>")
    value = _drop_timing(json.loads(text), frozenset(DERIVED_KEYS.get(name, ())))
    return json.dumps(value, sort_keys=True).encode()


def _renumbered_schema(schema, order: dict) -> object:
    """The skops schema with every ``__id__`` and member file name replaced by its order of appearance."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "__id__":
                value = order.setdefault(("id", value), len(order))
            elif key == "file" and isinstance(value, str) and value.endswith(".npy"):
                value = order.setdefault(("file", value), len(order))
            out[key] = _renumbered_schema(value, order)
        return out
    if isinstance(schema, list):
        return [_renumbered_schema(v, order) for v in schema]
    return schema


def _zip_digest(data: bytes, skops: bool) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    digest = hashlib.sha256()
    if skops:
        order: dict = {}
        schema = _renumbered_schema(json.loads(members.pop("schema.json")), order)
        digest.update(json.dumps(schema, sort_keys=True).encode())
        names = {name: index for (kind, name), index in order.items() if kind == "file"}
        unknown = sorted(set(members) - set(names))
        if unknown:
            raise ValueError(f"skops members the schema does not name: {unknown[:3]}")
        members = {f"{names[name]:08d}": content for name, content in members.items()}
    for name in sorted(members):
        digest.update(name.encode() + b"\0" + hashlib.sha256(members[name]).digest())
    return digest.digest()


def file_digest(path: Path, run: Path) -> str:
    data = path.read_bytes()
    if path.name == ".done" or path.suffix == ".json":
        data = _json_bytes(data, run, path.name)
    elif path.suffix in (".npz", ".skops"):
        data = _zip_digest(data, skops=path.suffix == ".skops")
    elif path.suffix in (".csv", ".txt", ".md"):
        data = data.replace(str(run.resolve()).encode(), b"<run>")
    return hashlib.sha256(data).hexdigest()


def run_digests(run: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file of ``run`` that counts (module docstring)."""
    return {str(p.relative_to(run)): file_digest(p, run) for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in LEFT_OUT}


def folder_digest(digests: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in sorted(digests.items())).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="one run folder, or two to compare")
    args = parser.parse_args(argv)
    if len(args.runs) > 2:
        parser.error(f"{len(args.runs)} folders: give one, or two to compare")
    tables = []
    for run in args.runs:
        if not run.is_dir():
            parser.error(f"{run}: not a folder")
        tables.append(run_digests(run))
        print(f"{run}: {len(tables[-1])} files, folder sha256 {folder_digest(tables[-1])}")
    if len(tables) == 1:
        for name, digest in tables[0].items():
            print(f"  {digest[:16]}  {name}")
        return 0
    first, second = tables
    differ = sorted(n for n in set(first) | set(second) if first.get(n) != second.get(n))
    for name in sorted(set(first) | set(second)):
        mark = "DIFFERS" if name in differ else "same"
        print(f"  {mark:7s} {first.get(name, '(absent)')[:16]}  {second.get(name, '(absent)')[:16]}  {name}")
    print(f"{len(first) + len(set(second) - set(first)) - len(differ)} files equal, {len(differ)} differ"
          + (f": {', '.join(differ)}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
