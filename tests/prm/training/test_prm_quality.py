"""AUROC, Brier and ECE against brute force and hand-computed values; the reliability plot."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm.training.quality import auroc, brier, ece, quality_report, reliability_plot


def _brute_auroc(scores, outcomes):
    pos = [s for s, y in zip(scores, outcomes) if y]
    neg = [s for s, y in zip(scores, outcomes) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0]), st.booleans()), min_size=2, max_size=30))
def test_auroc_equals_pairwise_count(pairs):
    scores, outcomes = zip(*pairs)
    if len(set(outcomes)) < 2:
        assert np.isnan(auroc(scores, outcomes))
    else:
        assert auroc(scores, outcomes) == pytest.approx(_brute_auroc(scores, outcomes))


def test_brier_and_ece_by_hand():
    scores = [0.1, 0.1, 0.8, 0.8, 0.8, 0.8]
    outcomes = [0, 1, 1, 1, 1, 0]
    assert brier(scores, outcomes) == pytest.approx((0.01 + 0.81 + 3 * 0.04 + 0.64) / 6)
    # bin [0.1,0.2): score 0.1 vs rate 0.5 (2 rows); bin [0.8,0.9): 0.8 vs 0.75 (4 rows)
    assert ece(scores, outcomes, bins=10) == pytest.approx((2 * 0.4 + 4 * 0.05) / 6)
    assert ece([1.0, 0.0], [1, 0]) == 0.0


def test_report_and_plot(tmp_path):
    rng = np.random.default_rng(0)
    scores = rng.random(200)
    outcomes = rng.random(200) < scores
    report = quality_report(scores, outcomes, steps=np.arange(200) % 2, groups=["a", "b"] * 100)
    assert set(report["per_step"]) == {"0", "1"} and set(report["per_group"]) == {"a", "b"}
    assert report["auroc"] > 0.7
    reliability_plot(scores, outcomes, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
