"""How good are the scores: AUROC, Brier score, expected calibration error, reliability plot.

All functions take per-row scores in [0, 1] and outcomes in {0, 1} (episode success, repeated on
every step of the episode) and are plain numpy, so they can be checked against brute force.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score


def auroc(scores: Sequence[float], outcomes: Sequence[float]) -> float:
    """Area under the ROC curve (scikit-learn's ``roc_auc_score``: ties count one half); NaN when a
    class is missing."""
    positive = np.asarray(outcomes, dtype=np.float64) >= 0.5
    if positive.all() or not positive.any():
        return float("nan")
    return float(roc_auc_score(positive, np.asarray(scores, dtype=np.float64)))


def brier(scores: Sequence[float], outcomes: Sequence[float]) -> float:
    """Mean squared error of the probability against the outcome (0 is perfect)."""
    scores = np.asarray(scores, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    return float(np.mean((scores - outcomes) ** 2)) if len(scores) else float("nan")


def reliability_bins(scores: Sequence[float], outcomes: Sequence[float], bins: int = 10):
    """Equal-width bins over [0, 1]: (mean score, observed success rate, count) per bin."""
    scores = np.asarray(scores, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    # Bin i holds [i/bins, (i+1)/bins); a score of exactly 1 goes to the last bin.
    index = np.minimum((scores * bins).astype(int), bins - 1)
    count = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        confidence = np.bincount(index, weights=scores, minlength=bins) / count
        accuracy = np.bincount(index, weights=outcomes, minlength=bins) / count
    return confidence, accuracy, count


def ece(scores: Sequence[float], outcomes: Sequence[float], bins: int = 10) -> float:
    """Expected calibration error: count-weighted mean |success rate - mean score| over bins."""
    confidence, accuracy, count = reliability_bins(scores, outcomes, bins)
    if count.sum() == 0:
        return float("nan")
    used = count > 0
    return float(np.sum(count[used] * np.abs(accuracy[used] - confidence[used])) / count.sum())


def summary(scores: Sequence[float], outcomes: Sequence[float], bins: int = 10) -> dict:
    scores = np.asarray(scores, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    return {
        "rows": len(scores),
        "success_rate": float(outcomes.mean()) if len(outcomes) else float("nan"),
        "mean_score": float(scores.mean()) if len(scores) else float("nan"),
        "auroc": auroc(scores, outcomes),
        "brier": brier(scores, outcomes),
        "ece": ece(scores, outcomes, bins),
    }


def quality_report(
    scores: Sequence[float],
    outcomes: Sequence[float],
    steps: Sequence[int] | None = None,
    groups: Sequence[str] | None = None,
    bins: int = 10,
    min_rows: int = 10,
) -> dict:
    """Pooled metrics plus the same per step index and per group (e.g. question type).

    Per-step and per-group entries need ``min_rows`` rows; AUROC is NaN where one class is absent.
    """
    report = summary(scores, outcomes, bins)
    scores = np.asarray(scores, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    for name, keys in (("per_step", steps), ("per_group", groups)):
        if keys is None:
            continue
        keys = np.asarray(keys)
        report[name] = {
            str(k): summary(scores[keys == k], outcomes[keys == k], bins)
            for k in sorted(set(keys.tolist()))
            if int((keys == k).sum()) >= min_rows
        }
    return report


def reliability_plot(
    scores: Sequence[float], outcomes: Sequence[float], path: str | os.PathLike, bins: int = 10, title: str = ""
) -> None:
    """Write a reliability diagram (observed success rate against mean score per bin) as PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede pyplot's import
    import matplotlib.pyplot as plt

    confidence, accuracy, count = reliability_bins(scores, outcomes, bins)
    used = count > 0
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(5, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    top.plot(confidence[used], accuracy[used], marker="o", label="PRM")
    top.set_ylabel("observed success rate")
    top.set_ylim(0, 1)
    top.set_title(title or f"Reliability (ECE {ece(scores, outcomes, bins):.3f})")
    top.legend(loc="upper left")
    edges = np.linspace(0, 1, bins + 1)
    bottom.bar(edges[:-1], count, width=1 / bins, align="edge", edgecolor="black")
    bottom.set_xlabel("PRM score")
    bottom.set_ylabel("rows")
    bottom.set_xlim(0, 1)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
