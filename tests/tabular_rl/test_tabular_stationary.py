"""The stationary model (a state's risk pooled over steps, the next state a draw of the step) and its member."""

import numpy as np
import pytest

from examples.rapids import SLIP, risk_odds_by_step
from examples.rapids_optimum import IDEAL_SCORE, RISKS, logged_rows, optimum
from tabular_rl.discretize import Discretizer
from tabular_rl.choice.members import MemberSpec, default_family, fit_member
from tabular_rl.stationary import estimate_stationary
from tabular_rl.transitions import Transitions, extract_transitions, with_objective

def test_the_estimate_counts_every_step_for_a_states_risk_and_the_step_alone_for_what_comes_next():
    # Two states, three steps; rows (step, state, action, next, credit) written out.
    step = np.array([0, 1, 2, 0, 1, 0, 1, 2])
    state = np.array([0, 1, 1, 1, 0, 0, 0, 1])
    action = np.array([0, 0, 1, 1, 0, 0, 1, 0])
    nxt = np.array([1, 1, 2, 0, 2, 0, 1, 2])  # 2 = over
    credit = np.array([0, 0, 1, 0, 0, 0, 0, 0], dtype=float)
    tr = Transitions(step, state, action, nxt, credit, credit, n_states=2)
    model = estimate_stationary(tr, smoothing=0.0)
    # state 0, base: 3 rows (steps 0, 1, 0), one failed end (step 1) -> 1/3 at every early step
    assert model.transitions[0, 0, 0, 2] == pytest.approx(1 / 3)
    assert model.transitions[1, 0, 0, 2] == pytest.approx(1 / 3)
    # where it goes after step 0: the states of step 1's rows (1, 0, 0): 1/3 to state 1, whatever (s, a)
    for s in range(2):
        for a in range(2):
            go = model.transitions[0, s, a, :2]
            assert go[1] / go.sum() == pytest.approx(1 / 3)
    # state 1, base: rows at steps 1 and 2 (the last one an end paying nothing): fails 1 of 2
    assert model.rewards[2, 1, 0] == pytest.approx(0.5)
    assert model.rewards[2, 1, 1] == pytest.approx(1.0)  # state 1, intervene: 2 rows, no failure
    assert np.allclose(model.transitions.sum(-1), 1.0)
    assert model.start == pytest.approx([2 / 3, 1 / 3])


@pytest.mark.parametrize("budget", [2, 3, 4])
def test_on_the_rapids_with_an_ideal_verifier_the_stationary_member_plays_the_exact_optimum(budget):
    rows = logged_rows(3000, seed=budget)
    member = fit_member(MemberSpec("table", 3, "uniform", dynamics="stationary"), rows, budget, objective="success")
    # its decisions are the optimum's wherever they matter: played in expectation on the true dynamics
    from examples.rapids_optimum import threshold_success

    def wants(t, risk, left=None):
        return bool(member.decide(np.array([t]), np.array([IDEAL_SCORE[risk]]), np.array([left]))[0])

    played = _success_in_expectation(wants, budget)
    assert played == pytest.approx(optimum(budget)[0], abs=0.01)
    assert threshold_success(budget, lambda t, r: r == "dangerous") < played
    assert member.solution.expected_success == pytest.approx(played, abs=0.03)  # its own model's estimate


def _success_in_expectation(wants, budget: int, horizon: int = 6) -> float:
    """Exact success of a gate deciding on (crossing, risk, budget left): backward induction over the true odds."""
    odds = risk_odds_by_step(horizon)
    value = np.ones(budget + 1)
    for t in reversed(range(horizon)):
        value = np.array([sum(odds[t][r] * (value[b - 1] if b > 0 and wants(t, r, b) else (1 - SLIP[r]) * value[b])
                              for r in RISKS) for b in range(budget + 1)])
    return float(value[budget])


def test_the_family_offers_it_where_the_objective_is_success_and_the_spec_reads_back():
    plain = default_family(6, "quantile", rows=100, horizon=5, decisions=5, top_budget=2)
    shaped = default_family(6, "quantile", rows=100, horizon=5, decisions=5, top_budget=2, pessimism=False)
    assert "table:6q,stationary" in [s.name for s in plain]
    assert all(s.dynamics == "steps" for s in shaped)
    spec = MemberSpec("priced", 6, dynamics="stationary", spend=1.5)
    assert MemberSpec.from_dict(spec.to_dict()) == spec
    old = {k: v for k, v in MemberSpec("table", 6).to_dict().items() if k != "dynamics"}  # a record of an older run
    assert MemberSpec.from_dict(old).dynamics == "steps"


def test_it_refuses_an_objective_it_cannot_read_a_failure_from():
    rows = logged_rows(20, seed=1)
    with pytest.raises(ValueError, match="objective='success' with no shaping"):
        fit_member(MemberSpec("table", 3, dynamics="stationary"), rows, 2, objective="reward")
    with pytest.raises(ValueError, match="dynamics='sometimes'"):
        fit_member(MemberSpec("table", 3, dynamics="sometimes"), rows, 2, objective="success")


def test_a_priced_stationary_member_spends_no_more_than_asked_on_its_model():
    rows = logged_rows(400, seed=7)
    member = fit_member(MemberSpec("priced", 3, "uniform", dynamics="stationary", spend=1.0), rows, 6, objective="success")
    assert member.solution.expected_interventions <= 1.0 + 1e-6
    d = Discretizer(3, "quantile", 0).fit(rows["prm_score"], rows["step"])
    tr = with_objective(extract_transitions(rows, d), "success")
    assert estimate_stationary(tr).horizon == 6


def test_the_stationary_member_cuts_equal_count_bins_whatever_the_configured_binning():
    family = default_family(6, "supervised", rows=100, horizon=5, decisions=5, top_budget=2)
    (stationary,) = [s for s in family if s.dynamics == "stationary"]
    assert stationary.binning == "quantile" and family[0].binning == "supervised"

