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


def clustered_auroc_interval(scores: Sequence[float], outcomes: Sequence[float], clusters: Sequence,
                             level: float = 0.95) -> tuple[float, float, float]:
    """``(auroc, low, high)``: the AUROC with an interval that treats each cluster (an episode's group) as the unit
    sampled, as the report's intervals do. Rows of one episode or group share their outcome and much of their text,
    so they are not independent draws: the variance is Obuchowski's (1997) for clustered ROC data (each positive's
    and each negative's placement value summed per cluster, a between-cluster variance of those sums) and the interval
    Student's t with clusters − 1 degrees of freedom, as ``helper.evaluation.metrics.cluster_t_interval``; clipped to
    [0, 1]. NaN bounds where a class is missing or there are fewer than two clusters."""
    if not 0 < level < 1:
        raise ValueError(f"level={level}: a confidence level must lie strictly between 0 and 1")
    from scipy import stats

    x = np.asarray(scores, dtype=np.float64)
    positive = np.asarray(outcomes, dtype=np.float64) >= 0.5
    _, cluster = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    m, n, k = int(positive.sum()), int((~positive).sum()), int(cluster.max()) + 1 if len(x) else 0
    if m == 0 or n == 0:
        return float("nan"), float("nan"), float("nan")
    pos, neg = x[positive], x[~positive]
    # psi(positive, negative): 1 above, 1/2 tied, 0 below; placement values are its row and column means.
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(1), psi.mean(0)
    area = float(v10.mean())
    if k < 2:
        return area, float("nan"), float("nan")
    m_i = np.bincount(cluster[positive], minlength=k)
    n_i = np.bincount(cluster[~positive], minlength=k)
    d10 = np.bincount(cluster[positive], weights=v10, minlength=k) - m_i * area
    d01 = np.bincount(cluster[~positive], weights=v01, minlength=k) - n_i * area
    scale = k / (k - 1)
    variance = scale * ((d10 ** 2).sum() / m ** 2 + (d01 ** 2).sum() / n ** 2 + 2 * (d10 * d01).sum() / (m * n))
    half = float(stats.t.ppf((1 + level) / 2, k - 1)) * float(np.sqrt(max(variance, 0.0)))
    return area, max(0.0, area - half), min(1.0, area + half)


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
