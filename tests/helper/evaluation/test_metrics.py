"""Metrics against hand-computed values (the numbers in comments are worked out by hand)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from helper.evaluation import metrics
from helper.evaluation.metrics import (
    apgr,
    bootstrap_ci,
    cpt,
    extrapolated_share,
    intervention_share,
    oracle_ratio,
    pgr,
    pgr_curve,
    summarize,
)


def test_pgr_and_share():
    assert pgr(0.4, 0.2, 0.6) == pytest.approx(0.5)
    assert pgr(0.1, 0.2, 0.6) == pytest.approx(-0.25)  # worse than never: not clipped
    assert math.isnan(pgr(0.3, 0.5, 0.5))  # no gap to recover
    assert intervention_share(1, 4) == 0.25
    assert intervention_share(5, 4) == 1.0  # clipped
    with pytest.raises(ValueError, match="interventions_always"):
        intervention_share(1, 0)


def test_curve_adds_origin_averages_ties_and_completes_to_always():
    x, y = pgr_curve([0.5, 0.25, 0.5], [0.6, 0.5, 0.8])
    assert x.tolist() == [0.0, 0.25, 0.5, 1.0]
    assert y.tolist() == pytest.approx([0.0, 0.5, 0.7, 1.0])  # (1, 1): always-intervene's point
    # A measured point at share 0 is kept as measured (no (0, 0) added); a curve that reaches
    # share 1 is not completed.
    x, y = pgr_curve([0.0, 1.0], [-0.1, 0.9])
    assert x.tolist() == [0.0, 1.0] and y.tolist() == pytest.approx([-0.1, 0.9])


def test_apgr_hand_computed():
    # Curve (0,0) -> (0.25,0.5) -> (0.5,0.75), completed by a line to (1,1):
    # 0.25*0.25 + 0.25*(0.5+0.75)/2 + 0.5*(0.75+1)/2 = 0.0625 + 0.15625 + 0.4375 = 0.65625
    assert apgr([0.25, 0.5, 0.5], [0.5, 0.75, 0.75]) == pytest.approx(0.65625, abs=1e-12)
    assert extrapolated_share([0.25, 0.5, 0.5], [0.5, 0.75, 0.75]) == pytest.approx(0.5)
    # Measured over the whole range: (0,0) (0.5,0.8) (1,1): 0.5*0.4 + 0.5*0.9 = 0.65, nothing extrapolated.
    assert apgr([0.0, 0.5, 1.0], [0.0, 0.8, 1.0]) == pytest.approx(0.65, abs=1e-12)
    assert extrapolated_share([0.0, 0.5, 1.0], [0.0, 0.8, 1.0]) == 0.0
    # The diagonal (always-intervene's own curve): area 1/2.
    assert apgr([1.0], [1.0]) == pytest.approx(0.5, abs=1e-12)
    # Only share 0 (never): the completion is the diagonal, all of it extrapolated.
    assert apgr([0.0], [0.0]) == pytest.approx(0.5) and extrapolated_share([0.0], [0.0]) == 1.0
    # An under-spender better than always at its last point: (0,0) (0.5,1.2) (1,1):
    # 0.5*0.6 + 0.5*1.1 = 0.85 (a flat tail at 1.2 would have credited 0.3 + 0.6 = 0.9).
    assert apgr([0.5], [1.2]) == pytest.approx(0.85, abs=1e-12)
    # Exact between any shares (no grid): (0,0) (0.005,1) (1,1): 0.0025 + 0.995 = 0.9975.
    assert apgr([0.005], [1.0]) == pytest.approx(0.9975, abs=1e-12)
    assert extrapolated_share([], []) == 1.0


def test_cpt_exact_on_segments():
    shares, pgrs = [0.25, 0.5], [0.5, 0.75]
    assert cpt(shares, pgrs, 0.5) == pytest.approx(0.25)
    assert cpt(shares, pgrs, 0.6) == pytest.approx(0.35)  # 0.25 + 0.1 / 1.0
    assert cpt(shares, pgrs, 0.25) == pytest.approx(0.125)
    assert cpt(shares, pgrs, 0.8) == pytest.approx(0.6)  # on the completion: 0.5 + 0.05 / 0.5
    assert cpt(shares, pgrs, 1.01) is None
    assert cpt([0.0], [1.0], 0.5) == 0.0


def test_oracle_ratio_and_bootstrap():
    assert oracle_ratio(0.45, 0.5) == pytest.approx(0.9)
    assert oracle_ratio(0.3, 0.0) is None
    assert bootstrap_ci([0.7] * 10) == (0.7, 0.7)
    # Two episodes (0 and 1): resampled means are 0, 0.5, 1 with prob 1/4, 1/2, 1/4,
    # so the 2.5% and 97.5% quantiles are 0 and 1.
    assert bootstrap_ci([0.0, 1.0], resamples=4000) == (0.0, 1.0)
    low, high = bootstrap_ci(np.r_[np.zeros(50), np.ones(50)], seed=3)
    assert low < 0.5 < high and high - low == pytest.approx(2 * 1.96 * 0.05, abs=0.03)
    assert bootstrap_ci([0.0, 1.0, 1.0], seed=1) == bootstrap_ci([0.0, 1.0, 1.0], seed=1)


def test_paired_difference_cancels_what_the_episodes_share():
    rng = np.random.default_rng(0)
    difficulty = rng.random(200)
    a, b = difficulty + 0.05, difficulty  # same episodes, a constant 0.05 better
    assert metrics.paired_difference(a, b) == pytest.approx((0.05, 0.05, 0.05))
    # Unpaired intervals of a and b overlap widely; the paired one excludes 0.
    mean, low, high = metrics.paired_difference(a + rng.normal(0, 0.01, 200), b)
    assert 0 < low < mean < high < 0.1 and bootstrap_ci(a)[0] < bootstrap_ci(b)[1]
    with pytest.raises(ValueError, match="same episodes: got 3 and 2"):
        metrics.paired_difference([1, 0, 1], [1, 0])


def test_total_score_is_agile_formula():
    assert metrics.total_score(0.8, 0.25, 0.3) == pytest.approx(0.725)


def _sweep():
    rows = [("never", 0, 0.2, 0.0), ("always", 4, 0.6, 4.0)]
    rows += [("helper", c, s, i) for c, s, i in zip(range(4), [0.2, 0.4, 0.5, 0.5], [0, 1, 2, 2])]
    rows += [("oracle", c, s, i) for c, s, i in zip(range(4), [0.2, 0.5, 0.6, 0.6], [0, 1, 2, 2])]
    frame = pd.DataFrame(rows, columns=["method", "budget", "success", "interventions"])
    frame["episodes"], frame["ci_low"], frame["ci_high"] = 10, frame["success"] - 0.1, frame["success"] + 0.1
    return frame


def test_summary_hand_computed():
    summary = summarize(_sweep(), training_calls={"helper": {"strong": 0, "human": 120}})
    assert summary["references"] == {"success_never": 0.2, "success_always": 0.6, "interventions_always": 4.0}
    helper = summary["methods"]["helper"]
    # helper: shares 0, .25, .5, .5 and PGR 0, .5, .75, .75 -> the curve of test_apgr_hand_computed.
    assert helper["apgr"] == pytest.approx(0.65625) and helper["apgr_extrapolated_share"] == pytest.approx(0.5)
    assert helper["cpt50"] == pytest.approx(0.25) and helper["cpt80"] == pytest.approx(0.6)
    assert helper["oracle_ratio"] == pytest.approx({0: 1.0, 1: 0.8, 2: 0.5 / 0.6, 3: 0.5 / 0.6})
    assert helper["training_calls"] == {"strong": 0, "human": 120}
    oracle = summary["methods"]["oracle"]
    # oracle: (0,0) (.25,.75) (.5,1) then to (1,1): .25*.375 + .25*.875 + .5 = 0.8125;
    # CPT50 = .25 * .5/.75, CPT80 = .25 + .25 * .05/.25 = 0.3.
    assert oracle["apgr"] == pytest.approx(0.8125)
    assert oracle["cpt50"] == pytest.approx(0.25 * 0.5 / 0.75) and oracle["cpt80"] == pytest.approx(0.3)
    always, never = summary["methods"]["always"], summary["methods"]["never"]
    assert always["apgr"] == pytest.approx(0.5) and always["apgr_extrapolated_share"] == 0.0
    assert never["apgr"] == pytest.approx(0.5) and never["apgr_extrapolated_share"] == 1.0
    json.dumps(summary)  # valid JSON: no NaN, int keys only
    table = metrics.summary_table(summary)
    assert table["method"].tolist()[0] == "oracle"
    assert table.set_index("method").loc["helper", "APGR extrapolated share"] == pytest.approx(0.5)


def test_one_step_oracle_is_no_reference_for_ratios():
    frame = _sweep()
    frame.loc[frame["method"] == "oracle", "method"] = "oracle_1step"
    summary = summarize(frame)
    assert "oracle_ratio" not in summary["methods"]["helper"]
    assert summary["methods"]["oracle_1step"]["apgr"] == pytest.approx(0.8125)


def test_summary_names_missing_reference():
    frame = _sweep()
    with pytest.raises(ValueError, match="no 'always' rows"):
        summarize(frame[frame["method"] != "always"])


def test_cluster_variance_is_floored_at_the_episodes_own():
    """Clusters whose means agree by chance leave the episodes' variance of the mean, not zero; clusters that
    differ keep the cluster-robust variance (hand computed) where it is the larger."""
    groups = ["a", "a", "b", "b"]
    variance, df = metrics.cluster_variance([1.0, -1.0, 1.0, -1.0], [groups])
    assert variance == pytest.approx(np.var([1, -1, 1, -1], ddof=1) / 4) and df == 1
    assert metrics.cluster_t_p([1.0, -1.0, 1.0, -1.0], [groups]) == 1.0  # mean 0
    assert metrics.cluster_t_p([1.0, 0.0, 1.0, 0.0], [groups]) > 0.05  # equal group means, not a certain effect
    variance, df = metrics.cluster_variance([1.0, 1.0, 0.0, 0.0], [groups])
    assert variance == pytest.approx(2 / 1 * (1.0 ** 2 + 1.0 ** 2) / 16) and df == 1  # K/(K-1) sum n_k^2 d_k^2 / N^2
    assert metrics.cluster_variance([1.0, 1.0, 1.0, 1.0], [groups]) == (0.0, 1.0)  # no variation at all
