"""Out-of-fold AUROC of several scores, per seed and pooled over seeds, with intervals over groups.

    python benchmarks/verifier/auroc_table.py runs/main-k8-s0/consistency runs/main-k8-s1/consistency \\
        runs/main-k8-s2/consistency --names PRM confidence consistency "PRM+consistency"

Each folder holds a ``scores.parquet`` (one row per judged decision: ``episode_id``, ``group``, ``outcome`` and
one column per score, out of fold; written by ``benchmarks/verifier/consistency.py``). Intervals: 95%
hierarchical bootstrap, product groups then episodes for one seed; seeds, then groups, then episodes pooled
(``benchmarks/verifier/grouped_auroc.py``); differences are each score minus the first name, paired.
``--rank-mean A B`` adds the mean of A's and B's ranks within each seed as one more score (nothing fitted).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import polars as pl  # noqa: E402

from benchmarks.verifier.grouped_auroc import cells, intervals, seeds_and_pooled  # noqa: E402


def load(folders: list[Path]) -> list[pl.DataFrame]:
    frames = []
    for folder in folders:
        path = folder / "scores.parquet"
        if not path.exists():
            raise SystemExit(f"{path}: not found; run benchmarks/verifier/consistency.py with --out {folder} first.")
        frames.append(pl.read_parquet(path).with_columns(pl.lit(str(folder)).alias("seed_run"),
                                                         (pl.lit(f"{folder}/") + pl.col("episode_id").cast(pl.String))
                                                         .alias("episode_id")))
    return frames


def with_rank_mean(frame: pl.DataFrame, names: list[str]) -> tuple[pl.DataFrame, str]:
    """The frame with one more score: the mean of the named scores' ranks within this frame (one seed's
    out-of-fold rows), nothing fitted."""
    name = " (+) ".join(names)
    ranks = [pl.col(n).rank("average") / frame.height for n in names]
    return frame.with_columns((pl.sum_horizontal(ranks) / len(names)).alias(name)), name


def table(frames: list[pl.DataFrame], names: list[str]) -> tuple[list[str], dict]:
    missing = sorted(set(names) - set(frames[0].columns))
    if missing:
        raise SystemExit(f"--names {missing}: not a score of these folders; choose from "
                         f"{[c for c in frames[0].columns if c not in ('episode_id', 'step', 'group', 'outcome', 'seed_run')]}")
    lines = ["| seed | rows (right) | groups | " + " | ".join(f"{n} [95%]" for n in names) + " | "
             + " | ".join(f"{n} - {names[0]} [95%]" for n in names[1:]) + " |",
             "|---" * (3 + 2 * len(names) - 1) + "|"]
    report = {}
    for seed, frame, levels in seeds_and_pooled(frames):
        found = intervals(frame, names, levels)
        report[seed] = found
        lines.append(f"| {seed} | {frame.height} ({int(frame['outcome'].sum())}) | {frame['group'].n_unique()} | "
                     + " | ".join(cells(found, names)) + " |")
    return lines, report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders with scores.parquet, one per seed")
    parser.add_argument("--names", nargs="+", required=True, help="score columns; the first is the reference")
    parser.add_argument("--rank-mean", nargs="+", action="append", default=[], metavar="NAME",
                        help="add a score: the mean rank of these scores within each seed (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    frames, names = load(args.folders), list(args.names)
    for combined in args.rank_mean:
        missing = sorted(set(combined) - set(frames[0].columns))
        if missing:
            raise SystemExit(f"--rank-mean {missing}: not a score of these folders")
        pairs = [with_rank_mean(f, combined) for f in frames]
        frames, names = [f for f, _ in pairs], names + [pairs[0][1]]
    lines, report = table(frames, names)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=float) + "\n")
    return report


if __name__ == "__main__":
    main()
