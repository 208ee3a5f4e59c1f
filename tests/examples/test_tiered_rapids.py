"""The tiered rapids: each help's catch as documented, the known dynamics matching the played river, the
exact optimum computed two independent ways, the measurement script end to end on a small collection, and its
baselines (cascade, random kind) evaluated exactly as a brute-force simulation of the river finds them."""

import numpy as np
import pytest
from imports import benchmark_module

from agile.protocol import Observation
from examples.rapids_optimum import optimum as one_help_optimum
from examples.tiered_rapids import (
    KINDS,
    RISK_ODDS_BY_STEP,
    RISKS,
    SLIP,
    Help,
    HelpAgent,
    make_agent,
    make_episodes,
    risk_of,
    risk_score,
)
from examples.tiered_rapids_optimum import best_one_kind, crossing_odds, evaluate_randomised, optimum, true_model
from helper.gates.tiered_baselines import cascade_table
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, evaluate_table, solve_tiered_exact


def _crossing(i: int, risk: str) -> Observation:
    text = f"Crossing 1 of 6. This crossing looks {risk} from the bank. The safe stone carries the marker 42."
    return Observation(f"ep-{i}", "tiered_rapids", "t", 0, text, 6)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_help_loses_a_crossing_only_where_the_agent_slips_and_it_misses(kind):
    help, agent = HelpAgent(kind), make_agent()
    observations = [_crossing(i, "dangerous") for i in range(4000)]
    helped = np.array(["42" in a.text for a in help.act(observations)])
    alone = np.array(["42" in a.text for a in agent.act(observations)])
    assert helped[alone].all()  # paired on the agent's own slips: a help never loses what the agent makes
    lost = 1.0 - helped.mean()
    expected = SLIP["dangerous"] * (1.0 - KINDS[kind].fix)
    assert abs(lost - expected) < 5 * np.sqrt(expected * (1 - expected) / 4000) + 1e-9


def test_the_cue_reads_the_risk_word_of_every_text_and_bins_back_to_it():
    disc = Discretizer(3, "uniform").fit(np.array([0.0, 1.0]))
    for episode in make_episodes("train", 50, 3):
        for risk, text in zip(episode.risks, episode.texts):
            assert risk_of(text) == risk
            assert disc.transform(np.array([risk_score(text)]))[0] == RISKS.index(risk)


def test_the_known_dynamics_are_those_of_the_played_river():
    """Each (risk, kind)'s loss rate in collected rows against ``crossing_odds``, within 5 standard errors."""
    rows = benchmark_module("tiered_rapids").collect(3000, seed=5, explore_p=(0.6,))
    rows = rows.with_columns(risk=rows["state_text"].map_elements(risk_of, return_dtype=str))
    for step, odds in enumerate(RISK_ODDS_BY_STEP):  # where a made crossing leads: the next crossing's odds
        at_step = rows.filter(rows["step"] == step)["risk"]
        for risk, p in odds.items():
            share = float((at_step == risk).mean())
            assert abs(share - p) < 5 * np.sqrt(max(p * (1 - p), 1e-4) / at_step.len())
    for risk in RISKS:
        for kind, help in (("", None), *KINDS.items()):
            cell = rows.filter((rows["risk"] == risk) & (rows["help_kind"].fill_null("") == kind))
            if cell.height < 50:
                continue
            lost = 1.0 - cell["reward"].mean()
            expected = 1.0 - crossing_odds(risk, help)
            assert abs(lost - expected) < 5 * np.sqrt(max(expected * (1 - expected), 1e-4) / cell.height)


@pytest.mark.parametrize("budget", range(0, 15))
def test_the_plain_optimum_is_the_tiered_solve_of_the_true_model(budget):
    resources = Resources.of([help.price for help in KINDS.values()], budget, horizon=6)
    solved = solve_tiered_exact(true_model(), resources)
    best, spend = optimum(budget)
    assert solved.expected_success == pytest.approx(best, abs=1e-12)
    assert solved.expected_cost == pytest.approx(spend, abs=1e-9)
    assert best >= max(best_one_kind(budget).values()) - 1e-12


@pytest.mark.parametrize("budget", range(0, 7))
def test_one_help_that_always_catches_at_price_one_is_the_rapids_optimum(budget):
    assert optimum(budget, {"human": Help(price=1, fix=1.0)}) == pytest.approx(one_help_optimum(budget), abs=1e-12)


def test_the_measurement_scores_every_budget_at_most_the_optimum():
    bench = benchmark_module("tiered_rapids")
    rows = bench.collect(400, seed=1)
    assert set(rows.filter(rows["help_kind"] != "")["help_kind"].unique()) == set(KINDS)
    measured = bench.measure(rows, [0, 3, 8])
    for budget, result in measured.items():
        best, _ = optimum(budget)
        assert 0.0 < result["exact"] <= best + 1e-12
        assert 0.0 < result["lagrangian"] <= best + 1e-12
    assert measured[0]["exact"] == pytest.approx(optimum(0)[0], abs=1e-12)
    assert measured[8]["exact"] > measured[3]["exact"] > measured[0]["exact"]
    for budget, result in measured.items():
        best, _ = optimum(budget)
        for baseline in bench.BASELINES:
            assert 0.0 < result[baseline] <= best + 1e-12
        for kind in KINDS:  # a one-kind table solved from data is no better than the exact one-kind optimum
            assert result[f"one_{kind}"] <= best_one_kind(budget)[kind] + 1e-12
        assert result["one_kind"] == result[f"one_{result['one_kind_choice']}"]
        assert result["cascade_cost"] <= budget + 1e-12 and result["random_kind_cost"] <= budget + 1e-12
    # At B = 0 nothing is affordable: every baseline is the agent alone.
    assert all(measured[0][b] == pytest.approx(optimum(0)[0], abs=1e-12) for b in bench.BASELINES)


def _river(policy: np.ndarray, budget: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: ``n`` episodes of the river played by ``policy[t, risk, budget left, action]`` (probabilities;
    action 0 the agent, k the k-th kind), drawn crossing by crossing from the example's odds, slips and catches.
    (success, spend) per episode; the spend is added up here, not read from ``Resources``."""
    rng = np.random.default_rng(seed)
    helps, prices = [None, *KINDS.values()], [0, *(int(h.price) for h in KINDS.values())]
    success, spend = np.zeros(n), np.zeros(n)
    for e in range(n):
        left, made = budget, True
        for t, odds in enumerate(RISK_ODDS_BY_STEP):
            s = rng.choice(len(RISKS), p=[odds[r] for r in RISKS])
            a = rng.choice(len(helps), p=policy[t, s, left])
            left -= prices[a]
            spend[e] += prices[a]
            if rng.random() >= crossing_odds(RISKS[s], helps[a]):
                made = False
                break
        success[e] = made
    return success, spend


def _cue_of_truth() -> np.ndarray:
    return np.array([(i + 0.5) / len(RISKS) for i in range(len(RISKS))])  # risk_score of each risk word


@pytest.mark.parametrize(("budget", "fallback"), [(5, True), (6, False)])
def test_the_cascade_is_worth_what_the_river_pays_and_never_spends_more_than_the_budget(budget, fallback):
    resources = Resources.of([h.price for h in KINDS.values()], budget, horizon=6)
    table = cascade_table(_cue_of_truth(), 0.5, 0.8, (1, 3), resources, 6, fallback)  # tricky: compute
    assert (table[:, 0] == 0).all() and set(np.unique(table[:, 1])) <= {0, 1}  # calm: agent; tricky: compute
    assert 3 in table[:, 2] and (1 in table[:, 2]) == fallback  # dangerous: the human, compute only as fallback
    exact = evaluate_table(true_model(), resources, table)
    one_hot = np.eye(len(KINDS) + 1)[table]  # (T, S, R, A)
    won, spent, _ = evaluate_randomised(true_model(), resources, one_hot)
    assert won == pytest.approx(exact.expected_success, abs=1e-12)
    assert spent == pytest.approx(exact.expected_cost, abs=1e-12)
    success, spend = _river(one_hot, budget, 6000, seed=budget)
    assert spend.max() <= budget
    assert abs(success.mean() - exact.expected_success) < 5 * success.std() / np.sqrt(success.size)
    assert abs(spend.mean() - exact.expected_cost) < 5 * spend.std() / np.sqrt(spend.size)


def test_the_random_kind_keeps_the_helpers_timing_draws_only_affordable_kinds_and_is_worth_what_the_river_pays():
    bench = benchmark_module("tiered_rapids")
    budget = 6
    resources = Resources.of([h.price for h in KINDS.values()], budget, horizon=6)
    helper = solve_tiered_exact(true_model(), resources).tables[0]
    policy = bench.random_kind_policy(helper, resources)
    assert ((policy[..., 0] == 1) == (helper == 0)).all()
    left = resources.states()[:, 0]
    for k, help in enumerate(KINDS.values(), start=1):
        assert (policy[:, :, left < help.price, k] == 0).all()
    calls = policy[helper > 0][:, 1:]  # where the helper calls: uniform over the kinds the budget left affords
    for row in calls:
        assert np.allclose(row[row > 0], 1.0 / (row > 0).sum())
    won, spent, _ = evaluate_randomised(true_model(), resources, policy)
    assert won < optimum(budget)[0]  # the kind matters here: a random one loses to the optimum's choice
    success, spend = _river(policy, budget, 6000, seed=11)
    assert spend.max() <= budget
    assert abs(success.mean() - won) < 5 * success.std() / np.sqrt(success.size)
    assert abs(spend.mean() - spent) < 5 * spend.std() / np.sqrt(spend.size)


def test_a_randomised_policy_that_could_overspend_is_refused():
    resources = Resources.of([h.price for h in KINDS.values()], 3, horizon=6)
    policy = np.zeros((6, len(RISKS), resources.size, len(KINDS) + 1))
    policy[..., 3] = 1.0  # the human (price 4) everywhere, with a budget of 3
    with pytest.raises(ValueError, match="cannot afford"):
        evaluate_randomised(true_model(), resources, policy)
