"""Which held-out rows two kept runs decided differently: their ``sweep/episodes.csv`` compared row by row.

    python benchmarks/setups/episodes_diff.py benchmarks/data/main-now/seed0 benchmarks/data/main-cf/seed0

A row is one (method, budget, episode, fold); it differs where its success or interventions do. Prints how many rows
each run holds, how many differ, and those by method (rows only one run holds are counted apart). Seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

KEY = ["method", "budget", "episode_id", "fold"]


def episodes(run: Path) -> pd.DataFrame:
    frame = pd.read_csv(run / "sweep" / "episodes.csv")
    return frame.assign(fold=frame["fold"] if "fold" in frame.columns else 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    a, b = episodes(args.first), episodes(args.second)
    both = a.merge(b, on=KEY, how="outer", suffixes=("_a", "_b"), indicator=True)
    paired = both[both["_merge"] == "both"]
    differ = paired[(paired["success_a"] != paired["success_b"])
                    | (paired["interventions_a"] != paired["interventions_b"])]
    print(f"{args.first}: {len(a)} rows; {args.second}: {len(b)} rows; in both: {len(paired)}; "
          f"in one only: {len(both) - len(paired)}")
    print(f"differing (success or interventions): {len(differ)} of {len(paired)}")
    for method, count in differ["method"].value_counts().sort_index().items():
        print(f"  {method:<24} {count}")


if __name__ == "__main__":
    main()
