"""A sweep folder as the Markdown tables of RESULTS.md.

    python benchmarks/setups/sweep_table.py runs/demo/sweep

Prints, per method: success at each budget with its 95% bootstrap interval and the interventions
per episode used, APGR with the share of it completed rather than measured, and training
strong/human calls (``sweep.csv`` and ``summary.json`` as
``helpgate sweep`` wrote them); then whether the helper reaches ``always``-level success: the
first budget whose interval holds ``always``'s success, and its interventions against
``always``'s; then, from ``episodes.csv``, the helper's success minus each baseline's on the same
episodes with a paired bootstrap interval (tighter than comparing the two intervals) that
resamples groups, then episodes within a group (``helper.evaluation.metrics.paired_grouped_difference``;
episodes alone for an ``episodes.csv`` with no group column, written before it existed). The
``oracle`` row is an upper bound and is not compared; ``oracle_1step`` (where decisions interact)
is no bound and is compared like any baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helper.evaluation.metrics import paired_grouped_difference

REFERENCES = ("never", "always", "counterfactual")  # reference rows, not methods to rank
NOT_COMPARED = (*REFERENCES, "helper", "oracle")  # the oracle is an upper bound, not a rival


def tables(sweep_dir: Path) -> str:
    sweep = pd.read_csv(sweep_dir / "sweep.csv")
    summary = json.loads((sweep_dir / "summary.json").read_text())["methods"]
    budgets = sorted(b for b in sweep.loc[sweep.method == "helper", "budget"].unique() if b > 0)
    lines = ["| method | " + " | ".join(f"C={c}" for c in budgets) + " | APGR (extrapolated) | training strong / human calls |",
             "|---|" + "---|" * (len(budgets) + 2)]
    order = sorted(summary, key=lambda m: -(summary[m].get("apgr") or -1))
    for method in order:
        if method in REFERENCES:
            continue
        rows = sweep[sweep.method == method].set_index("budget")
        cells = []
        for c in budgets:
            if c not in rows.index:
                cells.append("–")
                continue
            r = rows.loc[c]
            cells.append(f"{r.success:.3f} [{r.ci_low:.2f}, {r.ci_high:.2f}] ({r.interventions:.2f})")
        calls = summary[method].get("training_calls") or {}
        name = f"**{method}**" if method == "helper" else method
        extrapolated = summary[method].get("apgr_extrapolated_share")
        apgr = f"{summary[method]['apgr']:.3f}" + ("" if extrapolated is None else f" ({extrapolated:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {apgr} | "
                     f"{calls.get('strong', 0)} / {calls.get('human', 0)} |")
    never = sweep[sweep.method == "never"].iloc[0]
    always = sweep[sweep.method == "always"].iloc[0]
    lines.append("")
    lines.append(f"never = {never.success:.3f}; always = {always.success:.3f} "
                 f"[{always.ci_low:.2f}, {always.ci_high:.2f}] with {always.interventions:.2f} interventions "
                 f"per episode; {int(always.episodes)} held-out episodes per cell. Cells: success "
                 "[95% bootstrap interval] (interventions per episode). APGR (share of [0, 1] completed "
                 "to always's point rather than measured).")
    helper = sweep[(sweep.method == "helper")].sort_values("budget")
    reached = helper[helper.ci_high >= always.success]
    if len(reached):
        first = reached.iloc[0]
        lines.append(f"The helper reaches always-level success (its interval holds {always.success:.3f}) at "
                     f"C={int(first.budget)} with {first.interventions:.2f} interventions per episode: "
                     f"{first.interventions / always.interventions:.2f} of always's {always.interventions:.2f}.")
    else:
        best = helper.iloc[-1]
        lines.append(f"The helper does not reach always-level success up to C={int(best.budget)}: "
                     f"{best.success:.3f} [{best.ci_low:.2f}, {best.ci_high:.2f}] with {best.interventions:.2f} "
                     f"interventions per episode ({best.interventions / always.interventions:.2f} of always's).")
    episodes_file = sweep_dir / "episodes.csv"
    if episodes_file.exists():
        lines += ["", paired_table(pd.read_csv(episodes_file), budgets)]
    return "\n".join(lines)


def paired_table(episodes: pd.DataFrame, budgets: list[int]) -> str:
    """Helper minus each baseline, per budget, on the same held-out episodes."""
    lines = ["| helper minus | " + " | ".join(f"C={c}" for c in budgets) + " |", "|---|" + "---|" * len(budgets)]
    by = {key: g.set_index("episode_id")["success"] for key, g in episodes.groupby(["method", "budget"])}
    group_of = (episodes.drop_duplicates("episode_id").set_index("episode_id")["group"].astype(str)
                if "group" in episodes.columns else None)
    for method in sorted({m for m, _ in by} - set(NOT_COMPARED)):
        cells = []
        for c in budgets:
            if ("helper", c) not in by or (method, c) not in by:
                cells.append("–")
                continue
            helper, other = by[("helper", c)].align(by[(method, c)], join="inner")
            groups = None if group_of is None else group_of.loc[helper.index].tolist()
            mean, low, high = paired_grouped_difference(helper.to_numpy(), other.to_numpy(), groups)
            cells.append(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Success difference on the same episodes, 95% paired bootstrap interval "
                 + ("(groups, then episodes)." if group_of is not None else "(episodes; no group column)."))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", nargs="+", help="sweep folders written by helpgate sweep")
    for folder in p.parse_args().sweep:
        print(f"\n### {folder}\n")
        print(tables(Path(folder)))


if __name__ == "__main__":
    main()
