"""The smooth-risk model (a curve over step and score, the next state a draw of the step), its member, and the
judge whose thin cells it fills."""

import numpy as np
import polars as pl
import pytest

from examples.rapids_optimum import logged_rows, optimum, played_in_expectation, scored_rivers
from tabular_rl.choice.members import MemberSpec, default_family, fit_member
from tabular_rl.choice.selection import cross_fitted
from tabular_rl.discretize import Discretizer
from tabular_rl.smooth import estimate_smooth, fit_risk_curve, state_scores
from tabular_rl.stationary import estimate_stationary
from tabular_rl.transitions import extract_transitions, with_objective


INTERCEPT = (0.0, -2.0)


def _true_risk(step: int, score):
    return 1 / (1 + np.exp(-(INTERCEPT[step] - np.log(score / (1 - score)))))


def _rows_with_a_step_dependent_risk(episodes: int, seed: int) -> pl.DataFrame:
    """Two steps, the score uniform on [0.02, 0.98]; the agent fails with the logistic of ``INTERCEPT[t] - logit(score)``:
    the same score is far riskier early. Help never fails."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(episodes):
        alive, kept = True, []
        for t in range(2):
            score = float(rng.uniform(0.02, 0.98))
            helped = bool(rng.random() < 0.3)
            failed = not helped and rng.random() < _true_risk(t, score)
            kept.append({"episode_id": f"e{e}", "step": t, "intervened": helped, "budget_left": 1,
                         "reward": 0.0, "done": failed or t == 1, "prm_score": score})
            if failed:
                alive = False
                break
        rows += [r | {"success": float(alive)} for r in kept]
    return pl.DataFrame(rows)


def test_the_curve_reads_each_steps_own_risk_where_pooling_reads_their_mix():
    rows = _rows_with_a_step_dependent_risk(6000, seed=0)
    curve = fit_risk_curve(rows)
    grid = Discretizer(4, "uniform").fit(rows["prm_score"], rows["step"])
    means = state_scores(rows, grid)
    rates = curve.rates(means)
    for s in range(4):  # the truth at each bin's mean score, within sampling error
        assert rates[0, s, 0] == pytest.approx(_true_risk(0, means[s]), abs=0.03)
        assert rates[1, s, 0] == pytest.approx(_true_risk(1, means[s]), abs=0.03)
    assert np.isnan(rates[..., 1]).all()  # help never fails: no curve, the pooled rate stands in the model
    tr = with_objective(extract_transitions(rows, grid), "success")
    smooth = estimate_smooth(tr, rates, smoothing=1.0, discretizer=grid)
    pooled = estimate_stationary(tr, smoothing=1.0, discretizer=grid)
    low = 0  # the riskiest bin: pooling over the steps reads the mix at both steps
    assert smooth.transitions[0, low, 0, -1] == pytest.approx(rates[0, low, 0])
    assert smooth.transitions[0, low, 0, -1] > pooled.transitions[0, low, 0, -1] + 0.05
    assert smooth.rewards[1, low, 0] > pooled.rewards[1, low, 0] + 0.02  # the last step's success
    assert smooth.transitions[0, low, 1, -1] == pytest.approx(0.0, abs=1e-3)
    assert np.allclose(smooth.transitions.sum(-1), 1.0)


@pytest.mark.parametrize("budget", [2, 3, 4])
def test_on_the_rapids_with_an_ideal_verifier_the_smooth_member_plays_the_exact_optimum(budget):
    rows = logged_rows(3000, seed=budget)
    member = fit_member(MemberSpec("table", 3, "uniform", dynamics="smooth"), rows, budget, objective="success")
    scores, slip = scored_rivers(4000, seed=7)
    assert played_in_expectation(member.decide, scores, slip, budget) == pytest.approx(optimum(budget)[0], abs=0.02)


def test_the_family_offers_it_beside_the_stationary_member_on_twice_the_bins():
    names = [s.name for s in default_family(6, "supervised", rows=100, horizon=5, decisions=5, top_budget=2)]
    assert "table:12q,smooth" in names and names.index("table:12q,smooth") == names.index("table:6q,stationary") + 1
    assert "table:12q,smooth" not in [s.name for s in default_family(6, "quantile", rows=100, horizon=5, decisions=5,
                                                                     top_budget=2, pessimism=False)]
    with pytest.raises(ValueError, match="dynamics='smooth'"):
        fit_member(MemberSpec("table", 3, dynamics="smooth"), logged_rows(20, seed=1), 2, objective="reward")


def test_a_curve_needs_the_success_column():
    with pytest.raises(ValueError, match="success"):
        fit_risk_curve(logged_rows(20, seed=1).drop("success"))


def test_the_smooth_prior_reads_the_step_tables_less_above_their_truth_than_their_own_model_does():
    """On the rapids logged with a noisy verifier (64 rivers, 4 seeds), the judge's lean toward the step tables
    (cross-fitted minus true success on fresh rivers) shrinks as the smooth model takes a share of its thin cells."""
    scores, slip = scored_rivers(2000, seed=99, noise=0.2)
    caps = [2, 3, 4]
    lean = {"steps": [], "mixed": [], "smooth": []}
    for seed in range(4):
        rows = logged_rows(64, seed=1000 + seed, noise=0.2)
        family = [MemberSpec("table", 6, "quantile"), MemberSpec("table", 6, "quantile", backoff=1e9)]
        truth = np.array([[played_in_expectation(fit_member(s, rows, 4).decide, scores, slip, c) for c in caps]
                          for s in family])
        folds = rows["episode_id"].str.slice(1).cast(int).to_numpy() % 5
        for prior in lean:
            read = cross_fitted(rows, folds, family, caps, objective="success", judge_prior=prior)
            lean[prior].append(read.success - truth)
    steps, half, smooth = (float(np.mean(lean[k])) for k in ("steps", "mixed", "smooth"))
    assert steps > 0.05
    assert steps - 0.02 > half > smooth
    assert abs(smooth) < 0.04
    with pytest.raises(ValueError, match="judge_prior='flat'"):
        cross_fitted(rows, folds, family, caps, judge_prior="flat")
