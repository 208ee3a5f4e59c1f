"""``helpgate pipeline --cross-fit K``: every product group a test group once, from one collection.

    helpgate pipeline --out runs/cf --cross-fit 4 --data ../shared/productqa --eval-episodes 48
    helpgate report runs/cf                       # the folds pooled, groups resampled

With 2-4 test groups an interval over groups is wide by design; ProductQA has 24. The groups of the data root's
``train/`` and ``test/`` (the generated catalog's when ``--data`` is not given) are dealt to ``K`` folds (sorted,
shuffled by ``--seed``, dealt in turn; ``<out>/folds.json``), and:

1. **One collection** over every group: the pipeline's own collect stage on ``<out>/groups/train/`` (a link to
   each group folder), into ``<out>/trajectories``.
2. **Per fold k**, ``<out>/fold{k}/`` is an ordinary pipeline run (``helper.commands.pipeline.run``: the same
   stages, files and resume) on a data root of links, ``<out>/fold{k}/data/``: ``train/`` the other folds'
   groups, ``test/`` fold k's. Its collect stage is the shared collection's rows of ``train/``'s groups alone
   (``fold{k}/trajectories``; its manifest names the held-out groups), so nothing of a held-out group reaches
   its PRM (and its folds), scores, bins, solve, distill, or any method's training in its sweep (thresholds,
   router calibration, kNN points; online_rl plays ``train/``'s groups), and its sweep plays fold k's groups.
   ``--eval-episodes`` is per fold (round-robin over its groups: 8 a group takes 8 x its groups).
3. **Pooled**: ``<out>/sweep/`` holds every fold's ``episodes.csv`` concatenated (each episode's group and fold),
   ``sweep.csv`` of the pooled means with intervals that resample groups, and ``summary.json`` (the metrics of the
   pooled means, each fold's summary, the sweep's config with the original data root), so ``helpgate report <out>``
   reads the run as one seed whose groups are every group of the data.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from helper.stored_config import flat
from trajectories.files import write_json_atomic

FOLDS = "folds.json"


def groups_of(root: Path) -> dict[str, Path]:
    """Every group folder of ``root``'s train/ and test/, by name; names must be unique across the two."""
    from agile.envs.productqa import SPLITS, list_groups

    found: dict[str, Path] = {}
    for split in SPLITS:
        for path in list_groups(root, split) if (root / split).is_dir() else []:
            if path.name in found:
                raise ValueError(f"cross_fit: group {path.name!r} is in {found[path.name].parent} and {path.parent}; "
                                 "a group is one fold's, so give each group one folder.")
            found[path.name] = path.resolve()
    return found


def deal(names: list[str], k: int, seed: int) -> list[list[str]]:
    """``k`` folds of the sorted ``names``, shuffled by ``seed`` and dealt in turn (sizes differ by one at most)."""
    order = sorted(names)
    np.random.default_rng(seed).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


def link_root(folder: Path, splits: dict[str, list[Path]]) -> Path:
    """A ProductQA data root at ``folder`` whose ``split/`` holds a link to each given group folder."""
    for split, paths in splits.items():
        target = folder / split
        target.mkdir(parents=True, exist_ok=True)
        wanted = {p.name for p in paths}
        for stale in target.iterdir():  # a resumed run with other folds: only this fold's groups
            if stale.name not in wanted:
                stale.unlink()
        for path in paths:
            link = target / path.name
            if not link.exists():
                os.symlink(path, link, target_is_directory=True)
    return folder


def check(cfg) -> None:
    """Refuse a cross-fit that cannot work, naming the field."""
    if cfg.cross_fit < 2:
        raise ValueError(f"cross_fit={cfg.cross_fit}: give 2 or more folds (0: off).")
    if not cfg.spec.kind.question_sessions:
        raise ValueError(f"cross_fit={cfg.cross_fit} with env={cfg.spec.env!r}: folds are of ProductQA's product "
                         "groups (env productqa); run this environment without --cross-fit.")


def write_fold_rows(collection: Path, out: Path, held_out: list[str]) -> None:
    """``out``: the rows of ``collection`` whose task group is not held out, as a finished trajectory folder."""
    from prm.data.folds import task_group
    from trajectories.manifest import MANIFEST, load_manifest
    from trajectories.shards import mark_complete, read_trajectories, write_shard

    rows = read_trajectories(collection)
    group = pl.Series([task_group(t) for t in rows["task_id"].to_list()], dtype=pl.String)
    kept = rows.filter(~group.is_in(held_out))
    if kept.height == 0:
        raise ValueError(f"cross_fit: no row of {collection} lies outside the held-out groups {held_out}; collect "
                         "more episodes (--episodes) so that every group is played.")
    write_shard(kept, out / "shard-000.parquet")
    config = load_manifest(collection / MANIFEST).get("config", {})
    mark_complete(out, config | {"cross_fit": {"from": str(collection), "held_out_groups": held_out}})


def run(cfg, pipeline) -> dict:
    """The cross-fitted pipeline (see the module docstring); returns the pooled summary. ``pipeline``: the module
    whose stages each fold runs (``helper.commands.pipeline``, which calls this: handed down, not imported back)."""
    check(cfg)
    out = Path(cfg.out)
    groups = groups_of(cfg.spec.kind.data_root(cfg.spec))
    if cfg.cross_fit > len(groups):
        raise ValueError(f"cross_fit={cfg.cross_fit}: the data has {len(groups)} groups; give at most that many folds.")
    folds = deal(list(groups), cfg.cross_fit, cfg.seed)
    write_json_atomic({"k": cfg.cross_fit, "seed": cfg.seed, "data": str(cfg.spec.kind.data_root(cfg.spec)),
                       "folds": folds}, out / FOLDS)
    solved = pipeline.solved_budgets(cfg)

    # 1. One collection over every group.
    every = link_root(out / "groups", {"train": [groups[g] for g in sorted(groups)]})
    whole = replace(cfg, spec=replace(cfg.spec, data=str(every)), cross_fit=0)
    pipeline.collect_stage(whole, out, max(solved, default=0))

    # 2. Each fold: an ordinary run on the other folds' groups, swept on its own.
    for k, held_out in enumerate(folds):
        fold_out = out / f"fold{k}"
        train = [groups[g] for g in sorted(groups) if g not in held_out]
        root = link_root(fold_out / "data", {"train": train, "test": [groups[g] for g in held_out]})
        trained_on = fold_out / "trajectories"
        fold_cfg = replace(cfg, out=str(fold_out), spec=replace(cfg.spec, data=str(root)), cross_fit=0,
                           episodes=_episodes(out / "trajectories", held_out))
        print(f"\n[pipeline] === fold {k} of {cfg.cross_fit}: held-out groups {', '.join(held_out)} ===", flush=True)
        # One feature cache for every fold: a frozen backbone's features of an episode are the same in each.
        pipeline._stage(out, f"fold{k}", cfg.redo, lambda c=fold_cfg, h=held_out, t=trained_on: pipeline.run(
            c, collected=lambda: write_fold_rows(out / "trajectories", t, h),
            feature_cache=str(out / "prm-features.npz")))

    # 3. The folds pooled.
    pipeline._stage(out, "sweep", cfg.redo, lambda: pool(out, folds, cfg))
    return json.loads((out / "sweep" / "summary.json").read_text())


def _episodes(collection: Path, held_out: list[str]) -> int:
    """Training episodes of the fold (the collection's outside its held-out groups): online_rl's interaction."""
    from prm.data.folds import task_group
    from trajectories.shards import read_trajectories

    rows = read_trajectories(collection, require=("episode_id", "task_id")).select("episode_id", "task_id")
    firsts = rows.unique("episode_id")
    return max(1, sum(task_group(t) not in held_out for t in firsts["task_id"].to_list()))


def pool_finished(out: Path, config_class) -> dict:
    """Pool the folds of a cross-fitted run that finished (each fold's ``.done``), where the run was stopped
    before its last fold: ``<out>/sweep`` as ``pool`` writes it, its summary naming the folds pooled.
    The held-out groups of the finished folds are tested groups like any; the others are simply not there.
    ``config_class``: the pipeline's config dataclass (``helper.commands.pipeline.PipelineConfig``)."""
    from helper.stored_config import config_of

    out = Path(out)
    if not (out / FOLDS).exists():
        raise ValueError(f"{out}: no {FOLDS}; give the folder of a `helpgate pipeline --cross-fit K` run.")
    folds = json.loads((out / FOLDS).read_text())["folds"]
    finished = [k for k in range(len(folds)) if (out / f"fold{k}" / ".done").exists()]
    if not finished:
        raise ValueError(f"{out}: no fold has finished yet (no fold*/.done); run the pipeline on.")
    cfg = config_of(config_class, json.loads((out / "pipeline.json").read_text()), where=out / "pipeline.json")
    return pool(out, folds, cfg, only=finished)


def pool(out: Path, folds: list[list[str]], cfg, only: list[int] | None = None) -> dict:
    """``<out>/sweep``: the folds' episodes concatenated, their pooled means and the summary ``helpgate report``
    reads (its config is fold 0's sweep config with the original data root). ``only``: the folds to pool (all)."""
    only = list(range(len(folds))) if only is None else only
    from helper.evaluation.play import grouped_ci
    from helper.evaluation.metrics import summarize, sweep_columns
    from helper.evaluation.plots import save_sweep_plot
    from helper.evaluation.spend import at_spend
    from helper.evaluation.sweep import check_c0_rows

    frames, summaries = [], []
    for k in only:
        sweep = out / f"fold{k}" / "sweep"
        frames.append(pd.read_csv(sweep / "episodes.csv").assign(fold=k))
        summaries.append(json.loads((sweep / "summary.json").read_text()))
    episodes = pd.concat(frames, ignore_index=True)
    for k, held_out in ((k, folds[k]) for k in only):  # a fold's sweep plays its own groups and no other
        played = set(episodes.loc[episodes["fold"] == k, "group"].astype(str))
        if not played <= set(held_out):
            raise ValueError(f"cross_fit: fold {k}'s sweep played groups {sorted(played - set(held_out))} it trained on.")
    target = out / "sweep"
    target.mkdir(parents=True, exist_ok=True)
    episodes.to_csv(target / "episodes.csv", index=False)
    resamples = int(summaries[0].get("config", {}).get("ci_resamples", 2000))  # the folds' own
    rows = []
    for (method, budget), part in episodes.groupby(["method", "budget"], sort=False):
        success = part["success"].to_numpy(float)
        low, high = grouped_ci(success, part["group"].astype(str).tolist(), resamples=resamples,
                               seed=int(budget))
        rows.append({"method": method, "budget": int(budget), "success": success.mean(),
                     "interventions": part["interventions"].mean(), "episodes": len(part), "ci_low": low,
                     "ci_high": high})
    frame = pd.DataFrame(rows, columns=sweep_columns(rows))
    frame.to_csv(target / "sweep.csv", index=False)
    calls = {}
    for summary in summaries:  # training calls add up over the folds
        for method, entry in summary["methods"].items():
            for key, value in (entry.get("training_calls") or {}).items():
                if isinstance(value, (int, float)):
                    calls.setdefault(method, {}).setdefault(key, 0)
                    calls[method][key] += value
    summary = summarize(frame, calls)
    config = dict(summaries[0]["config"]) | {"data": cfg.spec.data, "out": str(target), "helper": None,
                                             "train_data": None, "cross_fit": len(folds)}
    summary |= {"config": config, "c0_check": check_c0_rows(episodes.to_dict("records")),
                "at_spend": at_spend(episodes.to_dict("records")),
                "cross_fit": {"k": len(folds), "folds": folds, "pooled": only, "pipeline": flat(cfg),
                              "skipped": [s.get("skipped", {}) for s in summaries],
                              "fold_summaries": [str(out / f"fold{k}" / "sweep" / "summary.json")
                                                 for k in only]}}
    write_json_atomic(summary, target / "summary.json")
    save_sweep_plot(frame, target / "sweep.png", f"cross-fitted over {len(folds)} folds"
                    + (f" ({len(only)} pooled)" if len(only) < len(folds) else ""))
    return summary

