"""The plain-cue check: helper against the exact budgeted optimum, and the verifier's AUROC for "this step is risky".

    for s in 0 1 2; do python benchmarks/experiment.py pipeline --env examples.plain_cue:make_episodes \\
        --agent examples.plain_cue:make_agent --prm-model smollm2 --prm-layers 4 --prm-pooling mean \\
        --prm-target process --budgets 1 2 3 4 5 --episodes 200 --eval-episodes 200 \\
        --methods helper random prm_threshold --seed $s --out runs/plain-cue/seed$s
        python benchmarks/experiment.py prm train --data runs/plain-cue/seed$s/trajectories \\
            --out runs/plain-cue/seed$s/prm-last --model smollm2 --layers 4 --pooling last --target process \\
            --base-only --tag-after state --seed $s --folds 5; done
    python benchmarks/setups/plain_cue.py runs/plain-cue/seed0 runs/plain-cue/seed1 runs/plain-cue/seed2 \\
        --other-prm prm-last

Where only the end is rewarded (``examples/plain_cue_sparse.py``: the same rivers, reward 1 at the last crossing
when it is made), with the pipeline's defaults for the target, the pooling and the binning (a plug-in env: all
chosen on the training folds, ``helper.commands.choose``):

    for s in 0 1 2; do python benchmarks/experiment.py pipeline --env examples.plain_cue_sparse:make_episodes \
        --agent examples.plain_cue:make_agent --prm-model smollm2 --prm-layers 4 --budgets 1 2 3 4 5 \
        --episodes 1000 --eval-episodes 200 --methods helper random prm_threshold --seed $s \
        --out runs/plain-cue-sparse/seed$s; done
    python benchmarks/setups/plain_cue.py runs/plain-cue-sparse/seed{0,1,2} --expected 1000

The optimum is the dense one (success is defined alike; tested). A run whose pipeline chose on its training folds
also prints the choice and every candidate's cross-validated training-fold figure (``pipeline.json``'s ``choice``).

Per run folder: the out-of-fold AUROC of the PRM score (low score = risky) for "this crossing is
tricky or dangerous" over every logged row (``prm/oof_scores.parquet``: no score comes from a head
that saw its episode), the same for every ``--other-prm`` folder inside the run (a PRM trained
another way on the same trajectories, e.g. the other pooling), and per budget C the helper's sweep
row against two references: the exact optimum's expected success and interventions
(``examples.plain_cue_optimum.optimum``, brute force over every risk history), and the exact
optimal gate played on the same held-out episodes as the helper (paired, so the ratio's noise is
the helper's own). Goals (issue 27): AUROC >= 0.95; helper success >= 0.95 x the optimum at every
C >= 1 with at most the optimum's interventions + 10%.

``--expected N`` also plays the helper and the optimal gate on ``N`` held-out episodes with the slips
taken out of the draw: a sure-footed agent crosses every stone, the gate decides as it would on the
real agent's path (a slip ends the episode, so every path that reaches a crossing has the same history
of right answers), and each episode's success is its exact probability under the real agent,
the product of (1 - slip) over the crossings left to it; its interventions, each weighted by the
probability of reaching it. What is left of the noise is which risk words the N episodes drew.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from examples.plain_cue import SLIP  # noqa: E402
from examples.plain_cue_optimum import (  # noqa: E402
    RISKS,
    SureFootedAgent,
    expected_outcome,
    optimal_gate,
    optimum,
    true_model,
)
from helper.data.environment import Environment  # noqa: E402
from helper.evaluation.play import evaluate_gate, load_helper  # noqa: E402
from helper.evaluation.metrics import NIL_GAIN  # noqa: E402
from helper.evaluation.sweep import SweepConfig  # noqa: E402
from helper.stored_config import config_of  # noqa: E402
from tabular_rl import solve_exact  # noqa: E402

RISKY = r"\b(" + "|".join(r for r, p in SLIP.items() if p > 0) + r")\b"
RISK_WORD = r"\b(" + "|".join(SLIP) + r")\b"
SUCCESS_SHARE, SPEND_MARGIN, AUROC_GOAL = 0.95, 1.10, 0.95


def risk_auroc(run: Path, prm: Path) -> float:
    """AUROC of the PRM's out-of-fold score (lower = riskier) for a risky crossing, every logged row."""
    rows = pl.read_parquet(run / "trajectories" / "*.parquet").select("episode_id", "step", "state_text")
    scored = pl.read_parquet(prm / "oof_scores.parquet").select("episode_id", "step", "prm_score").join(
        rows, on=["episode_id", "step"])
    if scored.height != rows.height:
        raise ValueError(f"{prm}: out-of-fold scores cover {scored.height} of {rows.height} logged rows")
    risky = scored["state_text"].str.contains(RISKY).to_numpy()
    return float(roc_auc_score(risky, -scored["prm_score"].to_numpy()))


def label_agreement(solve: Path, budgets: list[int]) -> dict[int, float]:
    """Share of logged rows whose solved label (``labels.parquet``) is the true optimal decision at that
    (crossing, risk, budget left): how much of the gap is the estimated MDP's, before any distillation."""
    rows = pl.read_parquet(solve / "labels.parquet")
    risk = np.array([RISKS.index(r) for r in rows["state_text"].str.extract(RISK_WORD).to_list()])
    step, left = rows["step"].to_numpy(), rows["budget_left"].to_numpy()
    out = {}
    for c in budgets:
        truth = solve_exact(true_model(), c).policy[step, risk, np.minimum(left, c)] > 0.5
        out[c] = float((rows[f"optimal_intervene_c{c}"].to_numpy() == truth).mean())
    return out


def paired_optimum(run: Path, budgets: list[int]) -> pd.DataFrame:
    """The exact optimal gate on the sweep's own held-out episodes (same env, split, seed, count)."""
    config = json.loads((run / "sweep" / "summary.json").read_text())["config"]
    env = Environment(config_of(SweepConfig, config, where=run / "sweep" / "summary.json"))
    rows, _, _ = evaluate_gate(env, optimal_gate, budgets, "exact_optimal", ci_resamples=200)
    return pd.DataFrame(rows).set_index("budget")


def expected_rows(run: Path, budgets: list[int], episodes: int) -> pd.DataFrame:
    """The helper and the exact optimal gate on ``episodes`` held-out episodes, in expectation over the
    slips (module docstring): per (method, budget) success and interventions."""
    summary = run / "sweep" / "summary.json"
    config = {**json.loads(summary.read_text())["config"], "episodes": episodes}
    cfg = config_of(SweepConfig, config, where=summary)
    env = Environment(cfg)
    env.base = SureFootedAgent()
    helper = load_helper(cfg, cfg.helper_backend)
    risks = [episode.risks for episode in env.episodes()]
    rows = []
    for method, gate in (("helper", helper.with_budget), ("exact_optimal", optimal_gate)):
        _, _, records = evaluate_gate(env, gate, budgets, f"{method} (no slips)", ci_resamples=10)
        for c in budgets:
            success, spent = [], []
            for episode_risks, steps in zip(risks, records[c]):
                chance, used = expected_outcome(episode_risks, [record.intervened for record in steps])
                success.append(chance)
                spent.append(used)
            rows.append({"method": method, "budget": c, "success": float(np.mean(success)),
                         "success_se": float(np.std(success, ddof=1) / np.sqrt(len(success))),
                         "interventions": float(np.mean(spent))})
    return pd.DataFrame(rows)


def report_expected(run: Path, budgets: list[int], episodes: int) -> dict:
    frame = expected_rows(run, budgets, episodes).set_index(["method", "budget"])
    print(f"\n{run}: in expectation over the slips, {episodes} held-out episodes")
    print(f"{'C':>2}  {'optimum':>8} {'opt int':>7}  {'paired':>6} {'p int':>5}  {'helper':>6} {'se':>5} {'h int':>5}  "
          f"{'h/opt':>5} {'h/pair':>6} {'int/opt':>7}  goal")
    out = {}
    for c in budgets:
        best, spend = optimum(c)
        h, p = frame.loc[("helper", c)], frame.loc[("exact_optimal", c)]
        ratio, spend_ratio = h["success"] / best, h["interventions"] / spend
        met = ratio >= SUCCESS_SHARE and spend_ratio <= SPEND_MARGIN
        print(f"{c:>2}  {best:8.4f} {spend:7.3f}  {p['success']:6.3f} {p['interventions']:5.2f}  {h['success']:6.3f} "
              f"{h['success_se']:5.3f} {h['interventions']:5.2f}  {ratio:5.3f} {h['success'] / p['success']:6.3f} "
              f"{spend_ratio:7.3f}  {'met' if met else 'MISSED'}")
        out[c] = {"helper": float(h["success"]), "helper_se": float(h["success_se"]),
                  "helper_interventions": float(h["interventions"]), "paired": float(p["success"]),
                  "paired_interventions": float(p["interventions"]), "met": bool(met)}
    return out


def report_choice(run: Path) -> dict | None:
    """The target, pooling and binning the pipeline chose on its training folds, with each candidate's figure."""
    choice = json.loads((run / "pipeline.json").read_text()).get("choice")
    if choice:
        print(f"\n{run}: chosen on training folds: target {choice['target']}, pooling {choice['pooling']}, binning "
              f"{choice['binning']}; held-out success over the training folds, mean over C (PRM out-of-fold AUROC "
              "for its own label):")
        for c in choice["candidates"]:
            print(f"  {c['target']:>8} {c['pooling']:>5} {c['binning']:>10}  {c['mean_held_out_success']:.4f}  "
                  f"({c['prm_oof_auroc']:.3f})")
    return choice


def report(run: Path, others: list[str]) -> dict:
    report_choice(run)
    sweep = pd.read_csv(run / "sweep" / "sweep.csv")
    helper = sweep[sweep["method"] == "helper"].set_index("budget")
    budgets = [int(c) for c in helper.index if c >= 1]
    paired = paired_optimum(run, budgets)
    aurocs = {"prm": risk_auroc(run, run / "prm")} | {name: risk_auroc(run, run / name) for name in others}
    agree = label_agreement(run / "solve", budgets)
    print(f"\n{run}: risky-step AUROC " + ", ".join(f"{k} {v:.4f}" for k, v in aurocs.items()))
    print("solved labels = true optimal decision, per C: " + ", ".join(f"{c}: {a:.3f}" for c, a in agree.items()))
    print(f"{'C':>2}  {'optimum':>8} {'opt int':>7}  {'paired':>6} {'p int':>5}  {'helper':>6} {'h int':>5} "
          f"{'nil':>5}  {'h/opt':>5} {'h/pair':>6} {'int/opt':>7}  goal")
    out = {"aurocs": aurocs, "label_agreement": agree, "budgets": {}}
    for c in budgets:
        best, spend = optimum(c)
        h, p = helper.loc[c], paired.loc[c]
        ratio, paired_ratio, spend_ratio = h["success"] / best, h["success"] / p["success"], h["interventions"] / spend
        met = ratio >= SUCCESS_SHARE and spend_ratio <= SPEND_MARGIN
        nil = h.get(NIL_GAIN, float("nan"))
        print(f"{c:>2}  {best:8.4f} {spend:7.3f}  {p['success']:6.3f} {p['interventions']:5.2f}  {h['success']:6.3f} "
              f"{h['interventions']:5.2f} {nil:5.2f}  {ratio:5.3f} {paired_ratio:6.3f} {spend_ratio:7.3f}  "
              f"{'met' if met else 'MISSED'}")
        out["budgets"][c] = {"optimum": best, "optimum_interventions": spend, "paired": float(p["success"]),
                             "paired_interventions": float(p["interventions"]), "helper": float(h["success"]),
                             "helper_interventions": float(h["interventions"]), "nil_gain": float(nil),
                             "met": bool(met)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="pipeline output folders (one per seed)")
    parser.add_argument("--other-prm", nargs="*", default=[],
                        help="PRM folders inside each run trained another way on its trajectories (e.g. prm-last)")
    parser.add_argument("--expected", type=int, default=0, metavar="N",
                        help="also evaluate on N held-out episodes in expectation over the slips (0: not)")
    args = parser.parse_args()
    results = {run: report(Path(run), args.other_prm) for run in args.runs}
    if args.expected:
        expected = {run: report_expected(Path(run), list(r["budgets"]), args.expected) for run, r in results.items()}
        met = [b["met"] for r in expected.values() for b in r.values()]
        print(f"\nin expectation over the slips ({args.expected} episodes a seed): helper within {SUCCESS_SHARE} x "
              f"optimum success and {SPEND_MARGIN} x its interventions: {sum(met)} of {len(met)} (seed, C) cells")
    auroc = [r["aurocs"]["prm"] for r in results.values()]
    met = [b["met"] for r in results.values() for b in r["budgets"].values()]
    print(f"\nAUROC (pipeline PRM) per seed: {', '.join(f'{a:.4f}' for a in auroc)}; goal >= {AUROC_GOAL}: "
          f"{'met' if min(auroc) >= AUROC_GOAL else 'MISSED'}")
    print(f"helper within {SUCCESS_SHARE} x optimum success and {SPEND_MARGIN} x its interventions: "
          f"{sum(met)} of {len(met)} (seed, C) cells")


if __name__ == "__main__":
    main()
