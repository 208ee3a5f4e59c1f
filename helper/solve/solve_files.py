"""What a solve folder holds: ``solve.json`` records the files the latest ``helpgate solve`` wrote.

A solve folder is read as one unit: ``helpgate distill`` pairs a ``policy_c{C}.npz`` with the
``discretizer.json`` and ``labels.parquet`` beside it, so a policy left over from an earlier solve
(with other budgets, bins or data) would be paired with a discretizer it was never solved on.
Hence:

- ``begin(out)`` (solve, before writing): removes ``solve.json`` first, so a solve cut short
  leaves a folder that ``distill`` refuses rather than one that looks finished.
- ``finish(out, written, budgets)`` (solve, after writing): deletes every solve output that this
  run did not write (an older ``policy_c{C}.npz``), then writes ``solve.json`` atomically: each
  file with its SHA-256, the budgets, and a fingerprint of the whole set (a tiered solve's, ``tiered_policy_c{B}.npz``,
  also its kinds, prices and caps under ``tiered``).
- ``verify(directory)`` (distill): ``solve.json`` must be there and a JSON object; every listed
  file must exist with its recorded hash; no ``policy_c*.npz`` may be there that it does not list.
  Each refusal names the files.

Files a solve never writes (notes, a pipeline's ``.done``) are left alone and never read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trajectories.files import sha256_of as sha256
from trajectories.files import write_json_atomic

SOLVE_MANIFEST = "solve.json"
POLICY_GLOB = "policy_c*.npz"
TIERED_GLOB = "tiered_policy_c*.npz"
"""A tiered solve's tables (``helper.solve.tiered_solve``), one per cost budget."""
FIXED_OUTPUTS = ("discretizer.json", "counts.csv", "labels.parquet", "solution.json")
VERSION = 1


def _outputs(out: Path) -> list[Path]:
    """Every file in ``out`` that some solve writes."""
    return sorted([p for glob in (POLICY_GLOB, TIERED_GLOB) for p in out.glob(glob) if p.is_file()]
                  + [out / name for name in FIXED_OUTPUTS if (out / name).is_file()])


def begin(out: Path) -> None:
    """Mark ``out`` as being written: without ``solve.json`` it is not a finished solve."""
    (out / SOLVE_MANIFEST).unlink(missing_ok=True)


def finish(out: Path, written: list[str], budgets: list[int], advice_cost: float | None,
           incomplete_input: dict | None = None, tiered: dict | None = None) -> dict:
    """Delete the solve outputs this run did not write, then record what it wrote (and, where the
    trajectories were an unfinished collection read with --allow-incomplete, what was unfinished)."""
    for stale in _outputs(out):
        if stale.name not in written:
            stale.unlink()
    files = {name: sha256(out / name) for name in sorted(written)}
    fingerprint = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    record = {"version": VERSION, "files": files, "budgets": sorted(budgets), "advice_cost": advice_cost,
              "fingerprint": fingerprint} | ({"incomplete_input": incomplete_input} if incomplete_input else {})
    record |= {"tiered": tiered} if tiered else {}  # kinds, prices and caps: a tiered solve's tables read by them
    write_json_atomic(record, out / SOLVE_MANIFEST)
    return record


def verify(directory: str | Path) -> dict:
    """The ``solve.json`` of ``directory``, after checking the folder is what it records."""
    directory = Path(directory)
    path = directory / SOLVE_MANIFEST
    rerun = f"re-run `helpgate solve --out {directory}`"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found, so the files in {directory} are not known to come from one "
                                f"finished solve (an older solve, or one cut short); {rerun}.")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error.msg}); {rerun}.") from error
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict) or not record.get("budgets"):
        raise ValueError(f"{path}: not a solve record (a JSON object with files and budgets); {rerun}.")
    missing = [name for name in record["files"] if not (directory / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{directory}: {', '.join(missing)} listed in {SOLVE_MANIFEST} but missing; {rerun}.")
    changed = [name for name, digest in record["files"].items() if sha256(directory / name) != digest]
    if changed:
        raise ValueError(f"{directory}: {', '.join(changed)} changed since the solve that {SOLVE_MANIFEST} records "
                         f"wrote it; {rerun}.")
    foreign = [p.name for p in _outputs(directory) if p.name not in record["files"]]
    if foreign:
        raise ValueError(f"{directory}: {', '.join(foreign)} not written by the solve that {SOLVE_MANIFEST} records "
                         f"(left from another solve); delete {'them' if len(foreign) > 1 else 'it'} or {rerun}.")
    return record
