"""Does the base agent's own confidence rank its mistakes? Out-of-fold AUROC of three scores.

    python benchmarks/verifier/prm_signals.py --data runs/demo/trajectories --layers 8 --out runs/prm_signals

On one trajectory folder whose ``proposal_signals`` column carries the agent's signals
(``Action.signals``; the LLM agent gives answer log-probability, margin and entropy), with the
same folds for all three (``prm.data.folds``: by task group):

- ``hidden``: ``python benchmarks/experiment.py prm train --no-signals`` (the backbone's hidden state at the step tag);
- ``signals``: a logistic regression on the signals alone (``prm.inputs.signals.signal_matrix``);
- ``hidden+signals``: ``python benchmarks/experiment.py prm train --signals True``.

Prints a Markdown table of the AUROC pooled and per question type (the type is read from the
task id for this report only: no score reads it) and writes it as JSON to ``--out``. The PRMs'
folders (with metrics.json: Brier and ECE before and after calibration) stay under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from prm.training import quality  # noqa: E402
from prm.data.episodes import TRAIN_COLUMNS  # noqa: E402
from prm.data.folds import task_type  # noqa: E402
from prm.inputs.signals import signal_keys, signal_matrix  # noqa: E402
from prm.training.train import TrainConfig, run_train  # noqa: E402
from trajectories.shards import read_trajectories  # noqa: E402

VARIANTS = ("hidden", "signals", "hidden+signals")


def signals_only(judged: pl.DataFrame, frame: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """Out-of-fold P(outcome) of a logistic regression on the signals, on ``judged``'s folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rows = judged.select("episode_id", "step", "fold", "used", "outcome").join(
        frame.select("episode_id", "step", *[c for c in frame.columns if c == "proposal_signals"]),
        on=["episode_id", "step"], how="left", maintain_order="left")
    x = signal_matrix(rows, keys)
    y = rows["outcome"].to_numpy() >= 0.5
    used, fold = rows["used"].to_numpy(), rows["fold"].to_numpy()
    scores = np.full(rows.height, np.nan)
    for k in np.unique(fold):
        fit = used & (fold != k)
        if len(np.unique(y[fit])) < 2:
            scores[fold == k] = y[fit].mean()
            continue
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x[fit], y[fit])
        scores[fold == k] = model.predict_proba(x[fold == k])[:, 1]
    return scores


def table(judged: dict[str, pl.DataFrame], min_rows: int = 10) -> dict[str, dict[str, float]]:
    """AUROC per variant, pooled (``all``) and per question type (types with ``min_rows`` rows)."""
    any_frame = next(iter(judged.values()))
    kinds = np.array([task_type(t) or "" for t in any_frame["task_id"].to_list()]) if "task_id" in any_frame.columns \
        else np.array([""] * any_frame.height)
    found = {}
    for name, frame in judged.items():
        scores, outcomes = frame["prm_score"].to_numpy(), frame["outcome"].to_numpy()
        found[name] = {"all": quality.auroc(scores, outcomes), "rows": int(frame.height)}
        for kind in sorted(set(kinds.tolist()) - {""}):
            if int((kinds == kind).sum()) >= min_rows:
                found[name][kind] = quality.auroc(scores[kinds == kind], outcomes[kinds == kind])
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="trajectory folder with a proposal_signals column")
    p.add_argument("--out", required=True, help="folder for the PRMs, the feature cache and results.json")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--layers", type=int, default=8, help="backbone layers kept (0: all)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--tag-after", default="action", choices=("action", "state"))
    p.add_argument("--target", default="soft", choices=("soft", "hard", "process"))
    p.add_argument("--base-only", action="store_true", help="fit and judge only the base agent's rows")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out = Path(args.out)
    frame = read_trajectories(args.data, require=TRAIN_COLUMNS, whole_episodes=True)
    keys = signal_keys(frame)
    if not keys:
        raise SystemExit(f"{args.data}: no agent signals (column 'proposal_signals' absent or every row '{{}}'); "
                         "collect with an agent that gives them.")
    common = TrainConfig(data=args.data, model=args.model, layers=args.layers or None, folds=args.folds,
                         tag_after=args.tag_after, target=args.target, base_only=args.base_only, seed=args.seed,
                         feature_cache=str(out / "features.npz"), progress=False)
    reports, judged = {}, {}
    for name, signals in (("hidden", False), ("hidden+signals", True)):
        folder = out / name.replace("+", "_")
        reports[name] = run_train(dataclasses.replace(common, out=str(folder), signals=signals), frame=frame)
        judged[name] = pl.read_parquet(folder / "validation_scores.parquet").filter("used")
    everything = pl.read_parquet(out / "hidden" / "validation_scores.parquet")
    scores = signals_only(everything, frame, keys)
    judged["signals"] = everything.with_columns(pl.Series("prm_score", scores)).filter("used")
    judged = {name: judged[name] for name in VARIANTS}
    results = table(judged)
    results["signal_keys"] = keys
    results["calibration"] = {name: {m: reports[name][m] for m in ("calibration", "oof_brier", "oof_ece")}
                              for name in reports}
    kinds = sorted({k for name in VARIANTS for k in results[name] if k not in ("all", "rows")})
    print(f"\nOut-of-fold AUROC ({args.folds} folds by task group, {results['hidden']['rows']} rows, "
          f"signals {keys}, backbone {args.model} layers {args.layers or 'all'}, tag after {args.tag_after})\n")
    print("| score | all | " + " | ".join(kinds) + " |")
    print("|---|---|" + "---|" * len(kinds))
    for name in VARIANTS:
        cells = [results[name].get(k, float("nan")) for k in ["all", *kinds]]
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
