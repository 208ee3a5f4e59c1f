"""The tiered rapids: each help's catch as documented, the known dynamics matching the played river, the
exact optimum computed two independent ways, and the measurement script end to end on a small collection."""

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
from examples.tiered_rapids_optimum import best_one_kind, crossing_odds, optimum, true_model
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, solve_tiered_exact


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
