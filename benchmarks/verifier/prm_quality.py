"""PRM quality on logged trajectories: out-of-fold AUROC per question type, tag after action vs state.

Which decisions of the base agent does a frozen-backbone PRM with a value head tell apart? Every
row gets a score from a head that never saw its episode (K folds split by episode), so the
AUROC uses all rows instead of one small validation split. The head, the L2 choice and the
features are the ones ``helpgate prm train`` uses (``prm.training.train``); only the split differs.

    python benchmarks/verifier/prm_quality.py --data runs/demo/trajectories --layers 8 --folds 5

Prints a Markdown table: rows, base accuracy and AUROC per question type for the step tag after
the action (does this answer look right?) and after the state (the gate's pre-action view).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import torch  # noqa: E402

from prm.data import labels as L  # noqa: E402
from prm.training import quality  # noqa: E402
from prm.data.episodes import TRAIN_COLUMNS  # noqa: E402
from prm.verifiers.model import ProcessRewardModel  # noqa: E402
from prm.training.probe import cross_validated_l2, fit_head  # noqa: E402
from prm.training.train import TrainConfig, episode_features  # noqa: E402
from trajectories.shards import read_trajectories  # noqa: E402


def load(dirs: list[str]) -> pl.DataFrame:
    frames = [read_trajectories(d, require=TRAIN_COLUMNS, whole_episodes=True) for d in dirs]
    frame = pl.concat([f.select(TRAIN_COLUMNS + ("task_id", "actor")) for f in frames])
    duplicated = frame.group_by("episode_id").len().filter(pl.col("len") > frame["step"].max() + 1)
    if duplicated.height:
        raise SystemExit(f"episode ids repeat across {dirs}: {duplicated['episode_id'].to_list()[:3]} ...; "
                         "collect the extra data with another --seed.")
    # ProductQA task ids are "<group>/<type>_<n>"; other environments pool into one type.
    kind = pl.col("task_id").str.split("/").list.last().str.replace(r"_\d+$", "")
    return frame.with_columns(kind.alias("question_type"))


def out_of_fold(frame: pl.DataFrame, cfg: TrainConfig, folds: int) -> np.ndarray:
    """Scores of the base agent's rows, each from a head fitted without its episode."""
    frame = L.add_labels(frame, tag_after=cfg.tag_after).sort(["episode_id", "step"])
    prm = ProcessRewardModel.create(cfg.model, head="value", tag_after=cfg.tag_after, layers=cfg.layers,
                                    device=cfg.device, seed=cfg.seed)
    features = episode_features(prm, frame, cfg)
    ids = frame["episode_id"].unique(maintain_order=True).to_list()
    x = torch.from_numpy(np.concatenate([features[e] for e in ids]))
    y = torch.tensor(frame["label_process"].to_numpy(), dtype=torch.float32)
    used = torch.from_numpy((frame["actor"] == "base").to_numpy().copy())
    episode_index = {e: i for i, e in enumerate(ids)}
    row_episode = np.array([episode_index[e] for e in frame["episode_id"]])
    fold_of = np.random.default_rng(cfg.seed).permutation(len(ids)) % folds
    row_fold = torch.from_numpy(fold_of[row_episode])
    scores = np.full(frame.height, np.nan)
    for k in range(folds):
        fit_rows = (row_fold != k) & used
        # Episode indices of the fitted rows, renumbered densely for the inner L2 cross-validation.
        _, inner = np.unique(row_episode[fit_rows.numpy()], return_inverse=True)
        head = copy.deepcopy(prm.head).cpu()
        l2, _ = cross_validated_l2(head, x[fit_rows], y[fit_rows], inner, cfg.head_steps, cfg.seed)
        fit_head(head, x[fit_rows], y[fit_rows], l2, cfg.head_steps)
        held = (row_fold == k).numpy()
        with torch.no_grad():
            scores[held] = torch.sigmoid(head(x[held])).numpy()
    return frame.with_columns(pl.Series("oof_score", scores)).filter(pl.col("actor") == "base")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", required=True, help="trajectory folders (episode ids must not repeat)")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--layers", type=int, default=8, help="backbone layers kept (0: all)")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--cache", default=None, help="folder for the feature caches (reruns skip the model)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    frame = load(args.data)
    print(f"{frame['episode_id'].n_unique()} episodes, {frame.height} rows, "
          f"{int((frame['actor'] == 'base').sum())} base-agent rows; backbone {args.model}, "
          f"layers {args.layers or 'all'}, {args.folds} folds by episode")
    results = {}
    for tag_after in ("action", "state"):
        started = time.perf_counter()
        cache = str(Path(args.cache) / f"features-{tag_after}-{args.layers}.npz") if args.cache else None
        cfg = TrainConfig(model=args.model, layers=args.layers or None, tag_after=tag_after, seed=args.seed,
                          feature_cache=cache, target="process")
        results[tag_after] = out_of_fold(frame, cfg, args.folds)
        print(f"tag after {tag_after}: {time.perf_counter() - started:.0f} s")
    base = results["action"]
    print("\n| question type | rows | base accuracy | AUROC, tag after action | AUROC, tag after state |")
    print("|---|---|---|---|---|")
    types = sorted(base["question_type"].unique().to_list()) + ["all"]
    for kind in types:
        cells = []
        for tag_after in ("action", "state"):
            r = results[tag_after]
            r = r if kind == "all" else r.filter(pl.col("question_type") == kind)
            cells.append(quality.auroc(r["oof_score"].to_list(), r["label_process"].to_list()))
        r = base if kind == "all" else base.filter(pl.col("question_type") == kind)
        print(f"| {kind} | {r.height} | {r['label_process'].mean():.2f} | {cells[0]:.3f} | {cells[1]:.3f} |")


if __name__ == "__main__":
    main()
