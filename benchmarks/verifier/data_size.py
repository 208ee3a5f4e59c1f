"""Does the PRM rank the base agent's mistakes better with more collected episodes? The pipeline's PRM
stage re-trained on the union of several finished runs' collections (same env and agent, different
seeds), and each run's own rows scored out of fold by the PRM of its run alone and by the PRM of the
union: a paired comparison on the same rows.

    python benchmarks/verifier/data_size.py runs/pqa0 runs/pqa1 runs/pqa2 --out runs/verifier-size

Every subset of the runs is trained (one run, every pair, ..., all of them), folds by group over the
subset's rows exactly as the pipeline folds (``PipelineConfig.prm_train_config`` of the first run, seed
included), with one feature cache for all of them (a frozen backbone reads each episode once).
Prints the out-of-fold AUROC by subset size, then, per run and pooled, each run's rows under the PRM of
its own run against the PRM of every run, with intervals that resample seeds, then groups, then episodes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from benchmarks.verifier.grouped_auroc import cells, intervals, labelled, seeds_and_pooled  # noqa: E402
from helper.commands.pipeline import PipelineConfig  # noqa: E402
from helper.stored_config import config_of  # noqa: E402
from prm.training import train as prm_train  # noqa: E402
from trajectories.shards import read_trajectories  # noqa: E402

KEYS = ["episode_id", "step"]


def subset_name(runs: tuple[Path, ...]) -> str:
    return "+".join(run.name for run in runs)


def trained_scores(runs: tuple[Path, ...], out: Path) -> pl.DataFrame:
    """Out-of-fold scores of the PRM trained on these runs' rows together (trained now unless already there)."""
    folder = out / subset_name(runs)
    scores = folder / "validation_scores.parquet"
    if not scores.exists():
        first = runs[0] / "pipeline.json"
        cfg = config_of(PipelineConfig, json.loads(first.read_text()), first)
        parts = [read_trajectories(run / "trajectories", whole_episodes=True) for run in runs]
        frame = pl.concat(parts, how="diagonal_relaxed")
        if frame["episode_id"].n_unique() != sum(part["episode_id"].n_unique() for part in parts):
            raise SystemExit(f"episode ids repeat across {[str(r) for r in runs]}: give runs of different seeds.")
        train_cfg = cfg.prm_train_config("", folder, progress=False, feature_cache=str(out / "features.npz"))
        prm_train.run_train(train_cfg, frame=frame)
    return pl.read_parquet(scores).filter("used")


def size_table(runs: list[Path], out: Path) -> tuple[str, dict[tuple[Path, ...], pl.DataFrame]]:
    from prm.training.quality import auroc

    found, lines = {}, ["| runs pooled | episodes | subsets: out-of-fold AUROC | mean |", "|---|---|---|---|"]
    for size in range(1, len(runs) + 1):
        aurocs = []
        for subset in itertools.combinations(runs, size):
            found[subset] = trained_scores(subset, out)
            aurocs.append((subset_name(subset), auroc(found[subset]["prm_score"].to_numpy(),
                                                      found[subset]["outcome"].to_numpy())))
        episodes = int(np.mean([found[s]["episode_id"].n_unique() for s in found if len(s) == size]))
        lines.append(f"| {size} | {episodes} | " + ", ".join(f"{n} {a:.3f}" for n, a in aurocs)
                     + f" | **{np.mean([a for _, a in aurocs]):.3f}** |")
    return "\n".join(lines), found


def paired_table(runs: list[Path], found: dict) -> str:
    """Each run's rows: its own run's PRM against the PRM of every run (same rows, same resamples)."""
    union = found[tuple(runs)].select(*KEYS, pl.col("prm_score").alias("all_runs"))
    frames = []
    for run in runs:
        own = found[(run,)].select(*KEYS, "task_id", "outcome", pl.col("prm_score").alias("own_run"))
        frames.append(labelled(own.join(union, on=KEYS), run.name))
    names = ["own_run", "all_runs"]
    lines = ["| rows of | PRM of its run [95%] | PRM of every run [95%] | difference [95%] |", "|---|---|---|---|"]
    for label, frame, levels in seeds_and_pooled(frames):
        lines.append(f"| {label} | " + " | ".join(cells(intervals(frame, names, levels), names)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="finished `helpgate pipeline` folders of one set-up")
    parser.add_argument("--out", type=Path, default=Path("runs/verifier-size"))
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        raise SystemExit("give two or more run folders (the same set-up, different seeds) to pool.")
    for run in args.runs:
        if not (run / "pipeline.json").exists():
            raise SystemExit(f"{run / 'pipeline.json'}: not found; give folders written by `helpgate pipeline`.")
    sizes, found = size_table(args.runs, args.out)
    text = sizes + "\n\n" + paired_table(args.runs, found)
    print(text)
    return text


if __name__ == "__main__":
    main()
