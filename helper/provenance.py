"""Where a run folder came from: ``provenance.json``, one entry per finished stage.

    with record_stage("runs/demo", "collect"):
        ...                                     # the stage's work; recorded only when it finishes

    {"stages": {"collect": {"command": ["helpgate", "pipeline", "--out", "runs/demo"],
                            "started": "2026-11-25T08:30:00.000Z", "seconds": 41.2,
                            "commit": {"describe": "a675940-dirty", "hash": "a675940...", "dirty": true},
                            "machine": {"cpu": "...", "cores": 2, "gpu": null, ...}}, ...}}

``helpgate pipeline`` records each of its stages in its ``--out`` folder (beside each stage's
``.done``), and every ``helpgate`` command records itself in the folder it writes (``--out``; for
``prm score``, the trajectories it scores), so a stage re-run alone is recorded too. Each entry
carries its own command, commit and machine: stages of one folder may come from different
processes. ``helpgate report`` prints them under its table.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

FILE = "provenance.json"
SOURCE = Path(__file__).resolve().parents[1]
"""The checkout this code runs from: its commit is the one recorded."""


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(SOURCE), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@lru_cache(maxsize=1)
def commit() -> dict:
    """``describe``, ``hash`` and ``dirty`` (uncommitted changes to tracked files) of the checkout;
    the installed version where the code is not a git checkout."""
    full = _git("rev-parse", "HEAD")
    if full is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return {"describe": None, "hash": None, "dirty": None, "version": version("helpgate")}
        except PackageNotFoundError:
            return {"describe": None, "hash": None, "dirty": None, "version": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"describe": _git("describe", "--always", "--tags", "--dirty"), "hash": full,
            "dirty": bool(status) if status is not None else None}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    # Only where torch is loaded already: importing it just to ask would cost seconds per command.
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    try:
        if torch.cuda.is_available():
            return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except RuntimeError:
        pass
    return []


def machine() -> dict:
    """CPU model, cores (all, and those this process may use), GPU names, OS and Python."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "usable_cores": usable, "gpus": _gpus(),
            "host": platform.node(), "os": platform.platform(), "python": platform.python_version()}


def read(folder: str | Path) -> dict:
    """The folder's provenance (``{"stages": {}}`` when it has none or it is unreadable)."""
    path = Path(folder) / FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"stages": {}}
    return data if isinstance(data.get("stages"), dict) else {"stages": {}}


def write_stage(folder: str | Path, stage: str, started: float, seconds: float,
                command: list[str] | None = None) -> Path:
    """Add (or replace) ``stage``'s entry in ``folder/provenance.json``."""
    from trajectories.files import write_json_atomic

    data = read(folder)
    data["stages"][stage] = {
        "command": list(sys.argv if command is None else command),
        # Milliseconds: stages of one pipeline can start within the same second, and the report orders by it.
        "started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z",
        "seconds": round(float(seconds), 2),
        "commit": commit(),
        "machine": machine(),
    }
    return write_json_atomic(data, Path(folder) / FILE)


@contextmanager
def record_stage(folder: str | Path, stage: str, command: list[str] | None = None):
    """Time the block and record it in ``folder`` once it finishes (a failed stage is not recorded)."""
    started, clock = time.time(), time.perf_counter()
    yield
    if Path(folder).is_dir():
        write_stage(folder, stage, started, time.perf_counter() - clock, command)
