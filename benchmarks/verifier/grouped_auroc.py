"""AUROC with intervals that resample what varies: seeds, then groups (or games), then episodes; seeds and
groups drawn apart where every seed covered the same groups.

Shared by the verifier benchmarks; every score of a table is judged under the same draws, so the
differences between scores are paired.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from helper.evaluation.metrics import percentile_interval, seed_group_weights
from prm.data.folds import task_group
from prm.training import quality

RESAMPLES = 2000


def weighted_auroc(score: np.ndarray, outcome: np.ndarray, weight: np.ndarray) -> float:
    """AUROC with row multiplicities (ties count one half)."""
    pos, neg = outcome >= 0.5, outcome < 0.5
    wp, wn = weight * pos, weight * neg
    if wp.sum() == 0 or wn.sum() == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    s, wp, wn = score[order], wp[order], wn[order]
    _, start = np.unique(s, return_index=True)
    p_tie = np.add.reduceat(wp, start)
    n_tie = np.add.reduceat(wn, start)
    below = np.concatenate([[0.0], np.cumsum(n_tie)[:-1]])
    return float((p_tie * (below + 0.5 * n_tie)).sum() / (wp.sum() * wn.sum()))


def intervals(frame: pl.DataFrame, names: list[str], levels: list[str], seed: int = 0) -> dict:
    """AUROC of each score column in ``names`` against ``outcome``, with a hierarchical interval (``levels``
    outermost first, then ``episode_id``), and each name's paired difference from the first under the same
    draws. An episode's rows move together: a resample weighs rows by their episode's multiplicity."""
    episodes = frame["episode_id"].unique(maintain_order=True).to_list()
    first = frame.group_by("episode_id", maintain_order=True).first()
    labels = [first[level].to_list() for level in levels] or [[0] * len(episodes)]
    weights = seed_group_weights(labels, RESAMPLES, seed)
    index = {e: i for i, e in enumerate(first["episode_id"].to_list())}
    row_episode = np.array([index[e] for e in frame["episode_id"].to_list()])
    y = frame["outcome"].to_numpy()
    draws = {n: np.array([weighted_auroc(frame[n].to_numpy(), y, w[row_episode]) for w in weights]) for n in names}
    out = {}
    for n in names:
        value = quality.auroc(frame[n].to_numpy(), y)
        diff = draws[n] - draws[names[0]]
        out[n] = {"auroc": value, "ci": percentile_interval(draws[n][np.isfinite(draws[n])]),
                  "diff": value - quality.auroc(frame[names[0]].to_numpy(), y),
                  "diff_ci": percentile_interval(diff[np.isfinite(diff)])}
    return out


def labelled(frame: pl.DataFrame, run: str) -> pl.DataFrame:
    """``frame`` (with ``task_id``) with the levels ``intervals`` resamples: ``seed_run`` and the task's ``group``."""
    return frame.with_columns(pl.lit(run).alias("seed_run"),
                              pl.col("task_id").map_elements(task_group, return_dtype=pl.String).alias("group"))


def seeds_and_pooled(frames: list[pl.DataFrame]) -> list[tuple[str, pl.DataFrame, list[str]]]:
    """(label, rows, levels) of each seed's frame (``seed_run`` names it; groups, then episodes) and, with more
    than one, of them pooled (seeds, then groups, then episodes)."""
    parts = [(f.item(0, "seed_run"), f, ["group"]) for f in frames]
    if len(frames) > 1:
        parts.append(("pooled", pl.concat(frames, how="diagonal_relaxed"), ["seed_run", "group"]))
    return parts


def cells(found: dict, names: list[str]) -> list[str]:
    """Table cells of ``intervals``' result: each AUROC [interval], then each difference from the first."""
    return ([f"{found[n]['auroc']:.3f} [{found[n]['ci'][0]:.3f}, {found[n]['ci'][1]:.3f}]" for n in names]
            + [f"{found[n]['diff']:+.3f} [{found[n]['diff_ci'][0]:+.3f}, {found[n]['diff_ci'][1]:+.3f}]"
               for n in names[1:]])
