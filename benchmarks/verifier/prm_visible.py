"""Why the frozen PRM tops at AUROC ~0.73 on shared ProductQA, and what the proposal's visible form adds:
train groups -> test groups, the frozen PRM (today's default) beside ``prm train --proposal-features`` on the
same rows (paired).

    python benchmarks/verifier/prm_visible.py RUN... --out runs/prm-visible --train-only --variants frozen visible state \
        visible+state "visible+state, no hidden"      # choosing: out of fold on the train groups only
    python benchmarks/verifier/prm_visible.py RUN... --out runs/prm-visible   # then the test groups: frozen vs the chosen
                                                                     # (--proposal-features --no-hidden)

Each RUN folder holds ``trajectories/`` (train groups) and ``test_trajectories/`` (test groups), both collected
in proposal mode by the commands below. Per RUN (a seed), the PRM stage of ``helpgate pipeline --data productqa
--decide-after proposal --seed S`` is run on the train groups once per variant (``VARIANTS``: as it is, with
``proposal_features=True``, ...; one feature cache: the backbone runs once), into ``OUT/<run>/<variant>``; each
variant's all-data model then scores the test groups (``prm score``). Printed:

1. AUROC on the test groups (the issue's target) and out of fold on the train groups, per seed and pooled, with
   95% intervals that resample product groups then episodes (seeds as a level when pooled), and the paired
   difference new - frozen under the same draws; beside them ``kinds alone``, a score that is only the rate of
   right proposals of the proposal's kind on the train groups (out of fold there), no model.
2. Where the frozen PRM ranks wrongly: its AUROC split by what a deployed agent sees of the proposal (its kind:
   a search that failed, found nothing, or found rows; a yes, a no, a free answer), the share of each kind and
   its rate of right proposals, and the AUROC cut into its between-kind part (pairs of two kinds: the base rates)
   and within-kind part (pairs of one kind). The dataset's question type appears only in this analysis, named so.

The collection commands (one seed; the pipeline's collect settings, then 32 test-group episodes):

    helpgate collect --env productqa --agent smollm2 --data ../shared/productqa --split train \\
        --decide-after proposal --episodes 64 --questions-per-episode 4 --budget 4 --explore-p 0 0.2 0.4 0.6 \\
        --shard-size 16 --seed S --out RUN/trajectories
    helpgate collect --env productqa --agent smollm2 --data ../shared/productqa --split test \\
        --decide-after proposal --episodes 32 --questions-per-episode 4 --budget 4 --explore-p 0 0.2 0.4 0.6 \\
        --shard-size 8 --seed S+1000 --out RUN/test_trajectories
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

from benchmarks.verifier.grouped_auroc import cells, intervals, seeds_and_pooled  # noqa: E402
from helper.commands.pipeline import PipelineConfig  # noqa: E402
from helper.stored_config import config_of  # noqa: E402
from prm.training import quality  # noqa: E402
from prm.data.folds import task_group, task_type  # noqa: E402
from prm.inputs.visible import proposal_features  # noqa: E402

VARIANTS = {
    "frozen": {},
    "visible": {"proposal_features": True},
    "state": {"state_features": True},
    "visible+state": {"proposal_features": True, "state_features": True},
    "visible+state, no hidden": {"proposal_features": True, "state_features": True, "hidden": False},
    "visible, no hidden": {"proposal_features": True, "hidden": False},
}
"""The PRM of today (frozen first 8 layers + the agent's signals) first, then the same head with the proposal
features (``prm.inputs.visible``), with the environment's state features (progress, memory hits), with both, and with
both or the proposal features alone but no hidden state (TextWorld's recipe: only numbers that mean the same in
every group)."""
DEFAULT_VARIANTS = ["frozen", "visible, no hidden"]


def seed_of(run: Path) -> int:
    saved = run / "pipeline.json"
    if saved.exists():
        return int(json.loads(saved.read_text()).get("seed", 0))
    digits = "".join(ch for ch in run.name if ch.isdigit())
    return int(digits) if digits else 0


def folder_name(variant: str) -> str:
    return variant.replace("+", "-").replace(", ", "-").replace(" ", "_")


def train_and_score(run: Path, out: Path, names: list[str], test: bool = True,
                    variants: dict[str, dict] | None = None) -> dict[str, dict]:
    """Each variant's PRM (``variants``: name -> prm train settings; ``VARIANTS`` by default) on the run's train
    groups (out-of-fold report) and, with ``test``, its scores of the test groups; the seconds each took."""
    variants = variants or VARIANTS
    from prm.scoring.score import ScoreConfig, run_score
    from prm.training.train import run_train

    cfg = config_of(PipelineConfig, data="productqa", decide_after="proposal", seed=seed_of(run))
    results = {}
    for name in names:
        folder = out / folder_name(name)
        started = time.perf_counter()
        if not (folder / "metrics.json").exists():
            run_train(cfg.prm_train_config(run / "trajectories", folder, progress=False,
                                           feature_cache=str(out / "features.npz"), **variants[name]))
        trained = time.perf_counter() - started
        scored = out / f"test-{folder_name(name)}"
        if test and not (scored / "manifest.json").exists():
            run_score(ScoreConfig(data=str(run / "test_trajectories"), model=str(folder), out=str(scored),
                                  progress=False))
        results[name] = {"train_s": round(trained, 1), "score_s": round(time.perf_counter() - started - trained, 1)}
    return results


def rows_of(run: Path, out: Path, names: list[str], test: bool = True) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(train rows with every variant's out-of-fold score, test rows with every variant's score or None), each
    with the texts, the outcome (was the proposal right) and the group."""
    keys = ["episode_id", "step"]
    train = pl.read_parquet(run / "trajectories" / "*.parquet")
    for i, name in enumerate(names):
        oof = pl.read_parquet(out / folder_name(name) / "validation_scores.parquet").select(
            *keys, "outcome", "used", "fold", pl.col("prm_score").alias(name))
        train = train.join(oof if i == 0 else oof.select(*keys, name), on=keys, how="inner")
    if not test:
        return train.filter("used").sort(keys), None
    held = pl.read_parquet(run / "test_trajectories" / "*.parquet").with_columns(
        (pl.col("proposal_reward") >= 0.5).cast(pl.Float64).alias("outcome"), pl.lit(True).alias("used"))
    for name in names:
        scored = pl.read_parquet(out / f"test-{folder_name(name)}" / "*.parquet").select(
            *keys, pl.col("prm_score").alias(name))
        held = held.join(scored, on=keys, how="inner")
    return train.filter("used").sort(keys), held.sort(keys)


def kind_of(state: str, proposal: str) -> str:
    """What a deployed agent sees of its proposal, as one word (the analysis' strata)."""
    v = proposal_features(state, proposal)
    if v["unanswered"]:
        return "unanswered"
    if v["searched"]:
        if v["sql_error"]:
            return "search: SQL error"
        if v["search_empty"]:
            return "search: no rows"
        return "search: rows, ids" if v["answer_ids"] else "search: rows, none"
    if v["yesno"]:
        return "yes" if v["yes"] else "no"
    return "ids/none" if v["answer_ids"] or v["answer_none"] else "free"


KINDS_ALONE = "kinds alone"
"""A score that is only the proposal's kind's rate of right proposals, fitted on the train groups (out of fold
there: on the other folds): the base rates the kinds carry, with no ranking inside a kind."""


def add_kind_rates(train: pl.DataFrame, held: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The ``KINDS_ALONE`` column on the train rows (out of fold) and the test rows (fitted on all train rows)."""
    kind, y, fold = np.array(train["kind"].to_list()), train["outcome"].to_numpy(), train["fold"].to_numpy()

    def rates(rows: np.ndarray, kinds: list[str]) -> np.ndarray:
        table = {k: y[rows & (kind == k)].mean() for k in set(kind[rows].tolist())}
        return np.array([table.get(k, y[rows].mean()) for k in kinds])

    oof = np.zeros(train.height)
    for k in np.unique(fold):
        oof[fold == k] = rates(fold != k, kind[fold == k].tolist())
    train = train.with_columns(pl.Series(KINDS_ALONE, oof))
    if held is not None:
        held = held.with_columns(pl.Series(KINDS_ALONE, rates(np.ones(train.height, bool), held["kind"].to_list())))
    return train, held


def decomposition(score: np.ndarray, outcome: np.ndarray, kind: np.ndarray) -> dict:
    """AUROC = share_within * AUROC(pairs of one kind) + (1 - share_within) * AUROC(pairs of two kinds)."""
    pos, neg = np.where(outcome >= 0.5)[0], np.where(outcome < 0.5)[0]
    cmp = (score[pos][:, None] > score[neg][None, :]) + 0.5 * (score[pos][:, None] == score[neg][None, :])
    same = kind[pos][:, None] == kind[neg][None, :]
    rates = {k: outcome[kind == k].mean() for k in np.unique(kind)}
    base = np.array([rates[k] for k in kind])  # the kinds' base rates as a score (in-sample: an upper bound)
    return {"auroc": float(cmp.mean()), "share_within": float(same.mean()),
            "within": float(cmp[same].mean()) if same.any() else float("nan"),
            "between": float(cmp[~same].mean()) if (~same).any() else float("nan"),
            "base_rates_alone": quality.auroc(base, outcome)}


def kind_table(frame: pl.DataFrame, names: list[str], title: str) -> list[str]:
    y = frame["outcome"].to_numpy()
    kind = np.array(frame["kind"].to_list())
    lines = [f"\n{title}", "| kind | rows | share | right | " + " | ".join(f"AUROC {n}" for n in names) + " |",
             "|---" * (4 + len(names)) + "|"]
    for k in sorted(set(kind.tolist()), key=lambda k: -(kind == k).sum()):
        pick = kind == k
        cells = [f"{quality.auroc(frame[n].to_numpy()[pick], y[pick]):.3f}" if 0 < y[pick].mean() < 1 else "–"
                 for n in names]
        lines.append(f"| {k} | {pick.sum()} | {pick.mean():.2f} | {y[pick].mean():.2f} | " + " | ".join(cells) + " |")
    lines.append("| **decomposition** | | | | " + " | ".join(
        "all {auroc:.3f} = {share_within:.2f} x within {within:.3f} + {share_between:.2f} x between {between:.3f}; "
        "base rates alone {base_rates_alone:.3f}".format(
            share_between=1 - (d := decomposition(frame[n].to_numpy(), y, kind))["share_within"], **d)
        for n in names) + " |")
    return lines


def with_kinds(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        pl.Series("kind", [kind_of(s, p) for s, p in zip(frame["state_text"], frame["proposal_text"])]),
        pl.col("task_id").map_elements(task_group, return_dtype=pl.String).alias("group"),
        pl.col("task_id").map_elements(lambda t: task_type(t) or "", return_dtype=pl.String).alias("qtype"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders with trajectories/ and test_trajectories/")
    parser.add_argument("--out", type=Path, default=Path("runs/prm-visible"))
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS),
                        help="PRMs to compare; the first is the reference of the paired differences")
    parser.add_argument("--train-only", action="store_true",
                        help="out of fold on the train groups only (choosing a variant: the test groups are not read)")
    args = parser.parse_args(argv)
    names, test = list(args.variants), not args.train_only
    trains, tests, timing = [], [], {}
    for run in args.runs:
        out = args.out / run.name
        started = time.perf_counter()
        seconds = train_and_score(run, out, names, test)
        timing[run.name] = {"wall_s": round(time.perf_counter() - started, 1), **seconds}
        train, held = rows_of(run, out, names, test)
        train, held = add_kind_rates(with_kinds(train), with_kinds(held) if held is not None else None)
        trains.append(train.with_columns(pl.lit(run.name).alias("seed_run")))
        if held is not None:
            tests.append(held.with_columns(pl.lit(run.name).alias("seed_run")))
    names = names + [KINDS_ALONE]
    report = {}
    print(f"\n## AUROC of the proposal's rightness, paired on the same rows (difference: each - {names[0]})\n")
    print("| rows | seed | rows (right) | groups | " + " | ".join(f"{n} [95%]" for n in names) + " | "
          + " | ".join(f"{n} - {names[0]} [95%]" for n in names[1:]) + " |")
    print("|---" * (4 + 2 * len(names) - 1) + "|")
    for where, frames in (("test groups", tests), ("train groups, out of fold", trains)):
        if not frames:
            continue
        for seed, frame, levels in seeds_and_pooled(frames):
            found = intervals(frame, names, levels)
            report[f"{where}/{seed}"] = found
            print(f"| {where} | {seed} | {frame.height} ({int(frame['outcome'].sum())}) | {frame['group'].n_unique()} | "
                  + " | ".join(cells(found, names)) + " |")
    for where, frames in (("train groups, out of fold", trains), ("test groups", tests)):
        if not frames:
            continue
        pooled = pl.concat(frames, how="diagonal_relaxed")
        for line in kind_table(pooled, names, f"### By the proposal's visible kind ({where}, seeds pooled)"):
            print(line)
        pooled = pooled.with_columns(pl.col("qtype").alias("kind"))
        for line in kind_table(pooled, names, f"### By the dataset's question type (an annotation: analysis only; {where})"):
            print(line)
    print(f"\nseconds per run (wall; each variant's training and test scoring inside): {json.dumps(timing)}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps({"auroc": report, "timing": timing}, indent=2, default=float))


if __name__ == "__main__":
    main()
