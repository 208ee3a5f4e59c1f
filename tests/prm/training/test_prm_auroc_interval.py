"""The verifier's AUROC with an interval over clusters (Obuchowski's clustered ROC variance, t over clusters)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from prm.training.quality import clustered_auroc_interval


def _clustered(rng, clusters=16, rows=8):
    """Rows that share their cluster's effect in both the score and the outcome (an episode's steps, a group's
    episodes): correlated within a cluster, independent between."""
    effect = np.repeat(rng.normal(0, 1.0, clusters), rows)
    outcome = (effect + rng.normal(0, 0.5, effect.size) > 0).astype(float)
    score = 0.6 * effect + rng.normal(0, 1.0, effect.size)
    return score, outcome, np.repeat(np.arange(clusters), rows)


def test_point_estimate_is_the_auroc_and_bounds_hold():
    score, outcome, cluster = _clustered(np.random.default_rng(0))
    area, low, high = clustered_auroc_interval(score, outcome, cluster)
    assert area == pytest.approx(roc_auc_score(outcome, score), abs=1e-12)
    assert 0.0 <= low < area < high <= 1.0
    ties = np.round(score, 0)  # tied scores count one half, as scikit-learn counts them
    assert clustered_auroc_interval(ties, outcome, cluster)[0] == pytest.approx(roc_auc_score(outcome, ties), abs=1e-12)


def test_covers_near_its_level_where_rows_are_clustered_and_a_row_level_interval_does_not():
    rng = np.random.default_rng(2)
    pooled = [_clustered(rng, clusters=4000) for _ in range(2)]
    truth = np.mean([roc_auc_score(o, s) for s, o, _ in pooled])
    covered = {"clusters": 0, "rows": 0}
    reps = 400
    for _ in range(reps):
        score, outcome, cluster = _clustered(rng)
        _, low, high = clustered_auroc_interval(score, outcome, cluster)
        covered["clusters"] += low <= truth <= high
        _, low, high = clustered_auroc_interval(score, outcome, np.arange(score.size))  # every row its own cluster
        covered["rows"] += low <= truth <= high
    assert covered["clusters"] / reps >= 0.90
    assert covered["rows"] / reps <= covered["clusters"] / reps - 0.05


def test_missing_class_or_one_cluster_gives_no_interval():
    assert np.isnan(clustered_auroc_interval([0.1, 0.9], [1, 1], ["a", "b"])).all()
    area, low, high = clustered_auroc_interval([0.1, 0.9], [0, 1], ["a", "a"])
    assert area == 1.0 and np.isnan(low) and np.isnan(high)
