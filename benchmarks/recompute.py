"""Every published table, recomputed from the repository alone, and checked against what RESULTS.md quotes.

    python benchmarks/recompute.py                 # rerun every entry of benchmarks/published.toml, rewrite its output
    python benchmarks/recompute.py --check         # rerun and compare; exit 1 naming each table that moved
    python benchmarks/recompute.py --check --only rapids-expected

A number in ``RESULTS.md`` is published when a committed command prints it from committed files: the kept runs
under ``benchmarks/data/`` (episodes, summaries, out-of-fold rows, per-episode outcomes) or nothing at all (an exact
computation). ``benchmarks/published.toml`` lists those commands and the file each one's output is kept in
(``benchmarks/published/``), which RESULTS' sections cite. A command may not read a run folder (``runs/`` is never
committed): every path it names must be in the repository, checked before it runs. The headline block has its own
generator and test (``helpgate report --headline``, ``tests/helper/evaluation/test_report_headline.py``).
"""

from __future__ import annotations

import argparse
import difflib
import glob
import os
import shlex
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "benchmarks" / "published.toml"


@dataclass(frozen=True)
class Table:
    name: str
    command: str
    output: Path
    note: str = ""

    def argv(self) -> list[str]:
        """The command's words, a glob expanded in sorted order against the repository (as a shell would)."""
        words = []
        for word in shlex.split(self.command):
            matches = sorted(glob.glob(word, root_dir=REPO)) if any(ch in word for ch in "*?[") else []
            words += matches or [word]
        return words

    def paths(self) -> list[str]:
        """The words that name files or folders (they hold a ``/`` and are not options)."""
        return [w.split("=", 1)[-1] for w in self.argv()[1:] if "/" in w and not w.startswith("-")]


def load(path: Path = MANIFEST) -> list[Table]:
    with path.open("rb") as handle:
        entries = tomllib.load(handle).get("table", [])
    tables = []
    for i, entry in enumerate(entries):
        missing = {"name", "command", "output"} - entry.keys()
        if missing:
            raise SystemExit(f"{path}: table {i + 1} lacks {', '.join(sorted(missing))}; each entry needs name, "
                             "command and output.")
        tables.append(Table(entry["name"], entry["command"], Path(entry["output"]), entry.get("note", "")))
    return tables


def unreadable(table: Table) -> list[str]:
    """The paths a command names that the repository does not hold (a run folder, a typo)."""
    return [p for p in table.paths() if p.startswith("runs/") or not (REPO / p).exists()]


def run(table: Table) -> str:
    missing = unreadable(table)
    if missing:
        raise SystemExit(f"benchmarks/published.toml: table {table.name!r} reads {', '.join(missing)}, which the "
                         "repository does not hold; keep the data under benchmarks/data/ and name that instead.")
    argv = table.argv()
    if argv[0] == "python":
        argv[0] = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{table.name}: `{table.command}` exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the kept outputs instead of writing")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these tables only")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args(argv)
    tables = load(args.manifest)
    unknown = set(args.only or []) - {t.name for t in tables}
    if unknown:
        raise SystemExit(f"--only: no table named {', '.join(sorted(unknown))} in {args.manifest}; "
                         f"known: {', '.join(t.name for t in tables)}")
    moved = []
    for table in tables:
        if args.only and table.name not in args.only:
            continue
        start = time.perf_counter()
        text = run(table)
        kept = REPO / table.output
        if args.check:
            old = kept.read_text() if kept.exists() else ""
            if old != text:
                moved.append(table.name)
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                           str(table.output), "recomputed"))
        else:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(text)
        state = ("MOVED" if table.name in moved else "same") if args.check else "written"
        print(f"{table.name}: {state} ({time.perf_counter() - start:.1f} s) {table.output}")
    if moved:
        print(f"{len(moved)} table(s) differ from what is kept: {', '.join(moved)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
