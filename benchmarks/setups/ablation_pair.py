"""Two pipeline runs that differ in one switch, compared on the same held-out episodes.

    python benchmarks/setups/ablation_pair.py runs/plain runs/gold

Both folders are ``helpgate pipeline --out`` folders run with the same seed and sizes (so the
sweep played the same episodes). Prints the PRM's out-of-fold and in-fold AUROC of each run
(``prm/metrics.json``), then one Markdown row per method: APGR of each run and, at every budget
C >= 1, the second run's success minus the first's on the same episodes with its 95% paired
bootstrap interval (``helper.evaluation.metrics.paired_difference``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helper.evaluation.methods import METHODS as REGISTRY
from helper.evaluation.metrics import paired_difference

METHODS = tuple(name for name in REGISTRY if name not in ("never", "always"))
"""The sweep's methods (its one registry, in run order), less the two references of PGR."""


def prm_line(run: Path) -> str:
    m = json.loads((run / "prm" / "metrics.json").read_text())
    oof = f"{m['oof_auroc']:.3f}" if m.get("oof_auroc") is not None else "n/a (no folds)"
    return (f"{run.name}: PRM out-of-fold AUROC {oof}, in-fold {m['in_fold_auroc']:.3f}, "
            f"report rows: {m['validation_rows']} (AUROC {m['validation']['auroc']:.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("first", type=Path)
    p.add_argument("second", type=Path)
    args = p.parse_args()
    print(prm_line(args.first))
    print(prm_line(args.second))
    summaries = [json.loads((r / "sweep" / "summary.json").read_text())["methods"] for r in (args.first, args.second)]
    episodes = [pd.read_csv(r / "sweep" / "episodes.csv") for r in (args.first, args.second)]
    helper = episodes[0][episodes[0]["method"] == "helper"]
    budgets = sorted(int(b) for b in helper["budget"].unique() if b >= 1)
    print(f"\n| method | APGR {args.first.name} | APGR {args.second.name} | "
          + " | ".join(f"Δ success C={c} [95% CI]" for c in budgets) + " |")
    print("|---|---|---|" + "---|" * len(budgets))
    for method in METHODS:
        if not all(method in s for s in summaries):
            continue
        cells = []
        for c in budgets:
            a, b = (e[(e["method"] == method) & (e["budget"] == c)].sort_values("episode_id") for e in episodes)
            if list(a["episode_id"]) != list(b["episode_id"]):
                raise SystemExit(f"{method} C={c}: the runs played different episodes; use the same seed and sizes.")
            mean, low, high = paired_difference(b["success"], a["success"])
            cells.append(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        print(f"| {method} | {summaries[0][method]['apgr']:.3f} | {summaries[1][method]['apgr']:.3f} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
