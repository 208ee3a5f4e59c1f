"""What a kept run's training folds read for each cap: the chosen member's cross-fitted figure beside the best
threshold member's, from ``helper/members/selection.json`` (the figures ``distill`` prints).

    python benchmarks/setups/selection_table.py benchmarks/data/arith-table-choice/seed1

Per run folder (or a cross-fit fold) and cap C: the chosen member, its cross-fitted success and interventions an
episode, then the best threshold member's. These are the judge's readings on the training folds, not a forecast of
held-out success (RESULTS, Trust). Seconds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def selections(run: Path) -> list[Path]:
    found = sorted(run.glob("**/helper/members/selection.json"))
    if not found:
        raise SystemExit(f"{run}: no helper/members/selection.json under it")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for run in args.runs:
        for path in selections(run):
            chosen = json.loads(path.read_text())["chosen"]
            print(f"### {path}\n")
            print("| C | chosen member | cross-fitted success | interventions | best threshold | its success | "
                  "its interventions |")
            print("|---|---|---|---|---|---|---|")
            for cap, entry in sorted(chosen.items(), key=lambda item: int(item[0])):
                member = entry["member"]["name"] if isinstance(entry["member"], dict) else entry["member"]
                best = entry.get("best_threshold") or {}
                print(f"| {cap} | {member} | {entry['cross_fitted_success']:.3f} | "
                      f"{entry['cross_fitted_interventions']:.2f} | {best.get('member', '–')} | "
                      + (f"{best['cross_fitted_success']:.3f} | {best['cross_fitted_interventions']:.2f} |"
                         if best else "– | – |"))
            print()


if __name__ == "__main__":
    main()
