"""Keep a finished run's evidence in the repository: the small files every published number is recomputed from.

    python benchmarks/setups/keep_run.py runs/rapids/seed0 benchmarks/data/rapids/seed0

A run folder holds gigabytes of trajectories, models and features; what ``helpgate report`` reads is small. This copies
exactly that into ``DEST`` (the same layout, so ``helpgate report DEST`` and ``helpgate report --headline`` read it as
they read the run): the sweep's ``episodes.csv`` (one row per method, budget and held-out episode), ``sweep.csv`` and
``summary.json``; the run's ``pipeline.json`` (its settings) and ``provenance.json`` (command, commit, machine, stage
times) and the sweep's own; a cross-fit's ``folds.json``; the PRM's ``metrics.json`` (its out-of-fold figures) and
the helper's ``members/selection.json`` (the member each cap played and every member's training-fold figure); of a
cross-fit's folds, their provenance, sweep summary, PRM metrics and choice (the pooled sweep holds their episodes). A
required file the run does not have is named.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

KEPT = ("pipeline.json", "provenance.json", "folds.json", "sweep/episodes.csv", "sweep/sweep.csv",
        "sweep/summary.json", "sweep/provenance.json", "prm/metrics.json", "helper/members/selection.json")
PER_FOLD = ("provenance.json", "sweep/summary.json", "prm/metrics.json", "helper/members/selection.json")
"""A cross-fit's folds: their choices and figures (the pooled sweep holds every fold's episodes)."""
OPTIONAL = ("folds.json", "prm/metrics.json", "helper/members/selection.json", "sweep/provenance.json")


def keep(run: Path, dest: Path) -> list[str]:
    """Copy ``KEPT`` (and each ``fold*/``'s) from ``run`` into ``dest``; returns the files not found."""
    if not (run / "sweep" / "episodes.csv").is_file():
        raise SystemExit(f"{run}: no sweep/episodes.csv; give a finished `helpgate pipeline` folder.")
    missing = []
    folders = [Path(".")] + sorted(p.relative_to(run) for p in run.glob("fold*") if p.is_dir())
    for folder in folders:
        for name in KEPT if folder == Path(".") else PER_FOLD:
            source = run / folder / name
            if not source.is_file():
                if folder == Path(".") and name not in OPTIONAL:
                    missing.append(str(source))
                continue
            target = dest / folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished pipeline folder")
    parser.add_argument("dest", type=Path, help="where its evidence goes (under benchmarks/data/)")
    args = parser.parse_args()
    missing = keep(args.run, args.dest)
    size = sum(p.stat().st_size for p in args.dest.rglob("*") if p.is_file())
    print(f"kept {args.run} in {args.dest} ({size / 1024:.0f} KiB)" + (f"; not found: {', '.join(missing)}"
                                                                      if missing else ""))


if __name__ == "__main__":
    main()
