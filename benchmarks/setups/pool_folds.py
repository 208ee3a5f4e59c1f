"""Pool the finished folds of a cross-fitted run that was stopped before its last fold (a time cap on a lent GPU,
say): ``<run>/sweep`` as the pipeline's own pooling writes it, its summary naming the folds pooled.

    python benchmarks/setups/pool_folds.py runs/gpu-cf0
    helpgate report runs/gpu-cf0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from helper.commands.cross_fit import pool_finished
from helper.commands.pipeline import PipelineConfig


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="folders of `helpgate pipeline --cross-fit K` runs")
    args = parser.parse_args(argv)
    for run in args.runs:
        summary = pool_finished(Path(run), PipelineConfig)
        fit = summary["cross_fit"]
        groups = sum(len(fit["folds"][k]) for k in fit["pooled"])
        print(f"{run}: pooled folds {fit['pooled']} of {fit['k']} ({groups} held-out groups) into {run}/sweep")


if __name__ == "__main__":
    main()
