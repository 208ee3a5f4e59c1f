"""What the training folds' judge read for a member against what that member scored on held-out episodes.

    python benchmarks/setups/judge_vs_play.py benchmarks/data/tw-llm-gpu/seed*

For each kept run (its ``solve/labels.parquet``: the training rows with their out-of-fold scores, and
``solve/solution.json``: the solve's settings): the member selection is read again exactly as the pipeline read it
(``helper.solve.select``: the family of the run's settings and its judge, 5 folds by task group), with one member
added, the
threshold at its top (every decision while the budget lasts: the ``first_k`` baseline as a member). Printed per cap:
the chosen member, the judge's reading of it and of ``first_k``, and what the helper and ``first_k`` scored when
played on the run's held-out episodes (``sweep/sweep.csv``); then, from the training rows alone, the success of
logged episodes by how many of their first ``--early`` decisions were interventions (does early help pay in the
data the judge reads?) and by the logging policy's exploration rate. The mean over runs closes the first table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from helper.solve.select import FOLDS, family_for, fold_ids, training_rows
from tabular_rl.choice.members import MemberSpec
from tabular_rl.choice.selection import cross_fitted


def read_run(run: Path, budgets: list[int]) -> list[dict]:
    solved, rows, _ = training_rows(run / "solve")
    record = json.loads((run / "helper" / "members" / "selection.json").read_text())
    listed = set(record["members"])  # the family as the run's distill built it (a later family may hold more)
    family = [s for s in family_for(solved, rows, budgets) if s.name in listed] + [MemberSpec("threshold", share=1.0)]
    ids, _ = fold_ids(rows, FOLDS)
    table = cross_fitted(rows, ids, family, budgets, smoothing=float(solved.get("smoothing", 1.0)),
                         objective=solved.get("objective", "success"), shaping=float(solved.get("shaping", 0.0)),
                         judge_prior=record.get("judge_prior", "steps"))
    chosen, top = table.best(list(range(len(family) - 1))), len(family) - 1
    played = pd.read_csv(run / "sweep" / "sweep.csv").set_index(["method", "budget"])["success"]
    return [{"run": run.name, "C": c, "chosen": family[chosen[c]].name,
             "judge_chosen": table.success[chosen[c], j], "judge_first_k": table.success[top, j],
             "played_helper": played.get(("helper", c), np.nan), "played_first_k": played.get(("first_k", c), np.nan)}
            for j, c in enumerate(budgets)]


def early_help(run: Path, early: int) -> pl.DataFrame:
    rows = pl.read_parquet(run / "solve" / "labels.parquet")
    return rows.group_by("episode_id").agg(
        pl.col("success").first(), pl.col("explore_p").first(), spent=pl.col("intervened").sum(),
        early=pl.col("intervened").filter(pl.col("step") < early).sum().clip(0, 3))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--early", type=int, default=4, help="the first decisions counted for early help")
    a = p.parse_args(argv)
    table = pd.DataFrame([r for run in a.runs for r in read_run(run, a.budgets)])
    pd.set_option("display.width", 160)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("\nmean over runs")
    print(table.groupby("C")[["judge_chosen", "played_helper", "judge_first_k", "played_first_k"]].mean()
          .to_string(float_format=lambda x: f"{x:.3f}"))
    logged = pl.concat([early_help(run, a.early) for run in a.runs])
    by = logged.group_by("early").agg(success=pl.col("success").mean(), episodes=pl.len()).sort("early")
    print(f"\ntraining rows: success of logged episodes by interventions in their first {a.early} decisions "
          "(3 = three or more)")
    print("\n".join(f"  {int(r['early'])}: {r['success']:.3f} of {r['episodes']}" for r in by.iter_rows(named=True)))
    by = logged.group_by("explore_p").agg(success=pl.col("success").mean(), spent=pl.col("spent").mean(),
                                          episodes=pl.len()).sort("explore_p")
    print("training rows: the logging policies' own success (random interventions at explore_p, the collection's cap)")
    print("\n".join(f"  explore_p {r['explore_p']:.1f}: {r['success']:.3f} with {r['spent']:.2f} interventions, "
                    f"{r['episodes']} episodes" for r in by.iter_rows(named=True)))


if __name__ == "__main__":
    main()
