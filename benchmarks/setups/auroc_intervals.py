"""The verifier's out-of-fold AUROC with an interval over task groups, per PRM of a run (or of each cross-fit fold).

    python benchmarks/setups/auroc_intervals.py runs/main-cf-3 --keep benchmarks/data/main-cf/seed0
    python benchmarks/setups/auroc_intervals.py benchmarks/data/main-cf/seed0        # again, from the kept rows

A PRM's ``metrics.json`` gives its out-of-fold AUROC as one number. Rows of one episode share its outcome and the
episodes of a task group much of their text, so the unit sampled is the group: the interval is Obuchowski's
clustered ROC variance with Student's t over the groups (``prm.training.quality.clustered_auroc_interval``), the
rule the report's intervals follow. From a run folder the rows are its PRM's ``oof_scores.parquet`` joined with the
training rows it judged (``trajectories/``: what ``metrics.json`` says it is judged against, ``outcome``, at 0.5,
on the base agent's rows alone where its ``rows`` says so; the group, the ``task_id`` before ``/``); ``--keep DEST`` writes them, small, as ``DEST/<fold>/prm/oof_rows.parquet``
(episode, step, group, target, score) so the numbers recompute from the repository. ``--in-fold`` adds each PRM's
in-fold AUROC as its ``metrics.json`` keeps it (``in_fold_auroc``: the head scored on the rows it was fitted on).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's packages

from prm.data.labels import add_labels  # noqa: E402
from prm.training.quality import clustered_auroc_interval  # noqa: E402
from trajectories.shards import read_trajectories  # noqa: E402

KEPT = Path("prm") / "oof_rows.parquet"


def prm_folders(run: Path) -> list[Path]:
    """The run's folders that hold a PRM: each cross-fit fold, else the run itself."""
    folds = sorted(p for p in run.glob("fold*") if (p / "prm" / "metrics.json").is_file() or (p / KEPT).is_file())
    return folds or [run]


def judged_column(metrics: dict) -> str:
    """The column the PRM's AUROC is judged against (its ``outcome``): the episode's success for the episode-level
    targets, else the step-level target it was trained on."""
    return "success" if str(metrics.get("outcome", "")).startswith("episode success") else metrics["target"]


def oof_rows(folder: Path) -> pl.DataFrame:
    """(episode_id, step, group, target, score) of one PRM's out-of-fold scores."""
    if (folder / KEPT).is_file():
        return pl.read_parquet(folder / KEPT)
    metrics = json.loads((folder / "prm" / "metrics.json").read_text())
    scores = pl.read_parquet(folder / "prm" / "oof_scores.parquet")
    # The raw head's score, as metrics.json judges it: a calibrator fitted to a below-chance fold turns it around.
    raw = "prm_score_raw" if "prm_score_raw" in scores.columns else "prm_score"
    scores = scores.select("episode_id", "step", pl.col(raw).alias("prm_score"))
    tag_after = "proposal" if metrics["target"] == "label_proposal" else "state"
    rows = add_labels(read_trajectories(folder / "trajectories"), tag_after=tag_after)
    if metrics.get("rows") == "actor == base":  # a PRM judged on the base agent's own rows only
        rows = rows.filter(pl.col("actor") == "base")
    rows = rows.select("episode_id", "step", pl.col("task_id").str.split("/").list.first().alias("group"),
                       pl.col(judged_column(metrics)).alias("target"))
    joined = scores.join(rows, on=["episode_id", "step"], how="inner").rename({"prm_score": "score"})
    if joined.height != rows.height:
        raise SystemExit(f"{folder}: {rows.height - joined.height} judged training rows have no out-of-fold score")
    return joined.select("episode_id", "step", "group", "target", "score").sort("episode_id", "step")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (or kept copies with oof_rows.parquet)")
    parser.add_argument("--keep", nargs="*", type=Path, default=None,
                        help="one kept folder per run: write its out-of-fold rows there")
    parser.add_argument("--in-fold", action="store_true",
                        help="add each PRM's in-fold AUROC from its metrics.json (in_fold_auroc)")
    args = parser.parse_args(argv)
    if args.keep is not None and len(args.keep) != len(args.runs):
        raise SystemExit(f"--keep: give one folder per run ({len(args.runs)}), got {len(args.keep)}")
    print(f"{'PRM':<40} {'rows':>5} {'groups':>6}  AUROC [95%, t over groups]"
          + ("  in fold" if args.in_fold else ""))
    for index, run in enumerate(args.runs):
        for folder in prm_folders(run):
            rows = oof_rows(folder)
            area, low, high = clustered_auroc_interval(rows["score"].to_numpy(), rows["target"].to_numpy() >= 0.5,
                                                       rows["group"].to_list())
            in_fold = ""
            if args.in_fold:
                metrics = folder / "prm" / "metrics.json"
                value = json.loads(metrics.read_text()).get("in_fold_auroc") if metrics.is_file() else None
                in_fold = f"  {value:.3f}" if value is not None else "  –"
            print(f"{str(folder):<40} {rows.height:>5} {rows['group'].n_unique():>6}  "
                  f"{area:.3f} [{low:.3f}, {high:.3f}]{in_fold}")
            if args.keep is not None:
                dest = args.keep[index] / folder.relative_to(run) / KEPT
                dest.parent.mkdir(parents=True, exist_ok=True)
                rows.write_parquet(dest)


if __name__ == "__main__":
    main()
