"""Does the agent's own consistency rank its mistakes? Out-of-fold AUROC with and without it.

    collect-offline-trajectories --agent llm --data ../shared/productqa --decide-after proposal --episodes 32 \
        --questions-per-episode 4 --budget 4 --explore-p 0 0.2 0.4 0.6 --consistency-samples 8 --out runs/pqa-k8/trajectories
    python benchmarks/verifier/consistency.py runs/pqa-k8/trajectories --out runs/consistency

On a run collected with ``--consistency-samples K`` (the constrained policy's ``consistency_agree`` and
``consistency_entropy``, ``agile.executor.consistency``, beside its ``function_margin``, ``answer_margin``
and ``answer_logprob``; absent where nothing competed), scored against
"the proposal is right" (the proposal-mode pipeline's PRM target), folds by product group (``prm.data.folds``) for all:

- ``agree (raw)``, ``-entropy (raw)``: the signal itself as the score (nothing fitted);
- ``consistency``: a logistic regression on the two consistency signals, out of fold;
- ``confidence``: the same on the agent's other signals (its margins and answer log-probability);
- ``confidence+consistency``: on all five;
- ``PRM``: the proposal-mode pipeline's PRM stage (``PipelineConfig.prm_train_config``: hidden state + the confidence
  signals, the pipeline's default before this option), trained on the rows with the consistency
  keys removed;
- ``PRM+consistency``: the same PRM reading all five signals.

The two PRMs share one feature cache (the backbone runs once); ``--no-prm`` leaves them out (the
signal scores need no backbone: labels and folds are made as ``prm train`` makes them). Prints a
Markdown table with the rows judged and writes ``results.json`` and, row by row, ``scores.parquet`` under
``--out`` (seeds pooled with intervals over groups: ``benchmarks/verifier/auroc_table.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from agile.executor.consistency import CONSISTENCY_KEYS  # noqa: E402
from benchmarks.verifier.prm_signals import signals_only  # noqa: E402
from helper.commands.pipeline import PipelineConfig  # noqa: E402
from prm.data.folds import task_group  # noqa: E402
from prm.training import quality  # noqa: E402
from prm.data.episodes import TRAIN_COLUMNS  # noqa: E402
from prm.inputs.signals import SIGNALS_COLUMN, signal_keys, signal_matrix  # noqa: E402
from prm.training.train import run_train  # noqa: E402
from trajectories.number_maps import number_map_column, number_maps  # noqa: E402
from trajectories.shards import read_trajectories  # noqa: E402


def without_consistency(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with the consistency keys taken out of every row's signals."""
    kept = [{k: v for k, v in row.items() if k not in CONSISTENCY_KEYS} for row in number_maps(frame[SIGNALS_COLUMN])]
    return frame.with_columns(number_map_column(SIGNALS_COLUMN, kept))


def labelled(frame: pl.DataFrame, cfg: PipelineConfig) -> pl.DataFrame:
    """What ``prm train`` judges, without training: every row, its proposal's outcome, its fold by group."""
    from prm.data.folds import assign_folds
    from prm.data.labels import add_labels

    train = cfg.prm_train_config("", "")
    rows = add_labels(frame, train.success_threshold, train.tag_after)
    folds = assign_folds(rows, cfg.fold_count(), cfg.seed)
    return rows.with_columns((pl.col("label_proposal") >= 0.5).cast(pl.Float64).alias("outcome"),
                             pl.lit(True).alias("used"),
                             pl.col("episode_id").replace_strict(folds.fold, return_dtype=pl.Int64).alias("fold"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="a trajectory folder collected with --decide-after proposal --consistency-samples K")
    p.add_argument("--out", required=True, help="folder for the two PRMs, their feature cache and results.json")
    p.add_argument("--seed", type=int, default=0, help="the PRM's seed (its folds)")
    p.add_argument("--no-prm", action="store_true", help="signal scores only: no PRM, no backbone pass")
    args = p.parse_args()
    out, trajectories = Path(args.out), Path(args.data)
    cfg = PipelineConfig(decide_after="proposal", seed=args.seed)
    frame = read_trajectories(str(trajectories), require=TRAIN_COLUMNS, whole_episodes=True)
    keys = signal_keys(frame)
    if not set(CONSISTENCY_KEYS) <= set(keys):
        raise SystemExit(f"{trajectories}: no consistency signals in {SIGNALS_COLUMN}; collect with "
                         "--consistency-samples K (K >= 1).")
    confidence = [k for k in keys if k not in CONSISTENCY_KEYS]
    judged, seconds = {}, {}
    prms = () if args.no_prm else (("PRM", without_consistency(frame)), ("PRM+consistency", frame))
    for name, data in prms:
        folder = out / name.replace("+", "_")
        train = cfg.prm_train_config(trajectories, folder, feature_cache=str(out / "features.npz"), progress=False,
                                     signals=True)
        started = time.perf_counter()
        run_train(train, frame=data)
        seconds[name] = round(time.perf_counter() - started, 1)
        judged[name] = pl.read_parquet(folder / "validation_scores.parquet")
    everything = judged["PRM"] if judged else labelled(frame, cfg)
    rows = everything.select("episode_id", "step").join(frame.select("episode_id", "step", SIGNALS_COLUMN),
                                                       on=["episode_id", "step"], how="left", maintain_order="left")
    used = everything["used"].to_numpy()
    outcome = everything["outcome"].to_numpy()
    x = signal_matrix(rows, list(CONSISTENCY_KEYS))
    present = used & (x[:, len(CONSISTENCY_KEYS):].sum(1) == 0)  # rows whose proposal was sampled
    scores = {
        "agree (raw)": x[:, 0],
        "-entropy (raw)": -x[:, 1],
        "consistency": signals_only(everything, frame, list(CONSISTENCY_KEYS)),
        "confidence": signals_only(everything, frame, confidence),
        "confidence+consistency": signals_only(everything, frame, keys),
    }
    for name, found in judged.items():
        scores[name] = found["prm_score"].to_numpy()
    results = {"rows": int(used.sum()), "rows_with_samples": int(present.sum()), "positive_rate":
               float((outcome[used] >= 0.5).mean()), "seconds": seconds, "auroc": {}, "auroc_sampled_rows": {}}
    for name, score in scores.items():
        results["auroc"][name] = quality.auroc(score[used], outcome[used])
        results["auroc_sampled_rows"][name] = quality.auroc(score[present], outcome[present])
    print(f"\nOut-of-fold AUROC for 'the proposal is right' ({cfg.fold_count()} folds by product group; "
          f"{results['rows']} rows, {results['rows_with_samples']} with samples; positive rate "
          f"{results['positive_rate']:.3f})\n")
    print("| score | all rows | rows with samples |")
    print("|---|---|---|")
    for name in scores:
        print(f"| {name} | {results['auroc'][name]:.3f} | {results['auroc_sampled_rows'][name]:.3f} |")
    print(f"\nPRM training seconds: {seconds}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    # Row by row, for intervals pooled over seeds (benchmarks/verifier/auroc_table.py).
    groups = rows.select("episode_id").join(frame.group_by("episode_id").agg(pl.col("task_id").first()),
                                            on="episode_id", how="left", maintain_order="left")["task_id"]
    pl.DataFrame({"episode_id": rows["episode_id"], "step": rows["step"],
                  "group": [task_group(t) for t in groups.to_list()], "outcome": outcome,
                  **{name: np.asarray(score, dtype=np.float64) for name, score in scores.items()}}
                 ).filter(pl.Series(used)).write_parquet(out / "scores.parquet")
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
