"""Does the TextWorld PRM rank wins on games it never saw? Out-of-fold AUROC by held-out game.

    python benchmarks/experiment.py pipeline --env textworld --agent simulator --prm-layers 2 --episodes 96 \
        --seed 0 --out runs/tw0
    python benchmarks/agents/textworld_transfer.py runs/tw0 --out runs/tw-transfer/seed0

Re-runs the run's PRM stage (``PipelineConfig.prm_train_config``: 5 folds by game, the run's layers,
target and tag) with each variant, on one feature cache (the backbone runs once), and scores every
variant on the same out-of-fold rows against the episode's outcome:

- ``hidden``: the pipeline's TextWorld PRM before this comparison (the hidden state alone);
- ``hidden+state``: ``prm train --state-features`` (progress, steps since progress, steps left,
  admissible commands, quest length beside the hidden state);
- ``state``: ``prm train --state-features --no-hidden`` (the head reads the state features alone; the
  pipeline's TextWorld default since);
- ``state (logistic)``: scikit-learn's logistic regression on the same features, same folds (a check);
- ``state (raw)``: each feature alone as the score, sign chosen on the training folds.

For each: AUROC pooled over the held-out games with a 95% bootstrap interval that resamples games,
per fold, and split into its two parts: ``within`` (mean AUROC inside the games that have both
outcomes: does it rank the steps of one game?) and ``between`` (Spearman correlation of the games'
mean score with their win rate: does it rank the games?). Writes ``results.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from helper.commands.pipeline import PipelineConfig  # noqa: E402
from helper.stored_config import config_of  # noqa: E402
from prm.training import quality  # noqa: E402
from prm.data.episodes import TRAIN_COLUMNS  # noqa: E402
from prm.inputs.signals import signal_matrix, state_keys  # noqa: E402
from prm.training.train import run_train  # noqa: E402
from trajectories.shards import read_trajectories  # noqa: E402

PRM_VARIANTS = {"hidden": {"state_features": False, "hidden": True},
                "hidden+state": {"state_features": True, "hidden": True},
                "state": {"state_features": True, "hidden": False}}


def logistic_oof(x: np.ndarray, y: np.ndarray, fold: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Out-of-fold P(win) of a standardised logistic regression, one fit per fold."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    scores = np.full(len(y), np.nan)
    for k in np.unique(fold):
        fit = used & (fold != k)
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x[fit], y[fit])
        scores[fold == k] = model.predict_proba(x[fold == k])[:, 1]
    return scores


def judge(score: np.ndarray, won: np.ndarray, game: np.ndarray, fold: np.ndarray, seed: int = 0,
          rounds: int = 1000) -> dict:
    """Pooled AUROC with a game-resampling interval, per fold, within games and between games."""
    from scipy.stats import spearmanr

    games = np.unique(game)
    rows = {g: np.flatnonzero(game == g) for g in games}
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(rounds):
        pick = np.concatenate([rows[g] for g in rng.choice(games, len(games))])
        value = quality.auroc(score[pick], won[pick])
        if np.isfinite(value):
            boot.append(value)
    within = [quality.auroc(score[r], won[r]) for r in rows.values() if 0 < won[r].mean() < 1]
    means = np.array([[score[r].mean(), won[r].mean()] for r in rows.values()])
    return {
        "auroc": quality.auroc(score, won),
        "interval": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))],
        "folds": [quality.auroc(score[fold == k], won[fold == k]) for k in np.unique(fold)],
        "within": float(np.mean(within)), "within_games": len(within),
        "between": float(spearmanr(means[:, 0], means[:, 1]).statistic),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a helpgate pipeline folder on --env textworld (its trajectories/ is read)")
    p.add_argument("--out", required=True, help="folder for the PRMs, their feature cache and results.json")
    p.add_argument("--feature-cache", help="hidden states of these episodes already computed (default: OUT/features.npz)")
    p.add_argument("--variants", nargs="+", choices=list(PRM_VARIANTS), default=list(PRM_VARIANTS),
                   help="PRM variants to train (the ones reading the hidden state run the backbone)")
    args = p.parse_args()
    run, out = Path(args.run), Path(args.out)
    cfg = config_of(PipelineConfig, json.loads((run / "pipeline.json").read_text()), where=run / "pipeline.json")
    trajectories = run / "trajectories"
    frame = read_trajectories(str(trajectories), require=TRAIN_COLUMNS, whole_episodes=True)
    cache = args.feature_cache or str(out / "features.npz")
    scores, seconds, judged = {}, {}, None
    for name, changes in ((n, PRM_VARIANTS[n]) for n in args.variants):
        folder = out / name.replace("+", "_")
        train = dataclasses.replace(cfg.prm_train_config(trajectories, folder), feature_cache=cache, progress=False,
                                    **changes)
        started = time.perf_counter()
        report = run_train(train, frame=frame)
        seconds[name] = round(time.perf_counter() - started, 1)
        found = pl.read_parquet(folder / "validation_scores.parquet")
        if judged is None:
            judged = found.select("episode_id", "step", "task_id", "used", "outcome")
        scores[name] = found["prm_score"].to_numpy()
        print(f"{name}: oof {report['oof_auroc']:.3f}, in fold {report['in_fold_auroc']:.3f}, {seconds[name]} s")
    folds = json.loads((out / args.variants[0].replace("+", "_") / "split.json").read_text())["folds"]
    fold = np.array([folds[e] for e in judged["episode_id"]])
    rows = judged.join(frame.select("episode_id", "step", "features"), on=["episode_id", "step"], how="left",
                       maintain_order="left")
    keys = state_keys(rows)
    x = signal_matrix(rows, keys)[:, :len(keys)]
    used, won = judged["used"].to_numpy(), judged["outcome"].to_numpy() >= 0.5
    scores["state (logistic)"] = logistic_oof(x, won, fold, used)
    for j, key in enumerate(keys):
        sign = np.empty(len(won))
        for k in np.unique(fold):  # the direction each feature works in, read off the training folds
            fit = used & (fold != k)
            sign[fold == k] = 1.0 if quality.auroc(x[fit, j], won[fit]) >= 0.5 else -1.0
        scores[f"raw {key.split(':', 1)[1]} (sign out of fold)"] = sign * x[:, j]
    game = judged["task_id"].to_numpy()
    results = {name: judge(s[used], won[used], game[used], fold[used]) for name, s in scores.items()}
    results["_meta"] = {"rows": int(used.sum()), "games": int(len(np.unique(game))), "win_rate": float(won[used].mean()),
                        "seconds": seconds, "state_keys": keys}
    print(f"\nOut-of-fold AUROC by held-out game ({results['_meta']['rows']} steps, {results['_meta']['games']} games, "
          f"{len(np.unique(fold))} folds by game)\n")
    print("| score | AUROC [95% over games] | per fold | within games | between games (Spearman) |")
    print("|---|---|---|---|---|")
    for name in scores:
        r = results[name]
        print(f"| {name} | {r['auroc']:.3f} [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}] | "
              f"{' / '.join(f'{v:.2f}' for v in r['folds'])} | {r['within']:.3f} ({r['within_games']}) | "
              f"{r['between']:+.3f} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    print(f"\nwrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
