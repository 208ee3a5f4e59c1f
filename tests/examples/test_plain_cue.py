"""The plain-cue example: its factory contract, its brute-force optimum against the solver, end to end."""

import json
from collections import Counter

import pandas as pd
import polars as pl
import pytest

from agile.protocol import BASE, Action
from agile.rollout import run_episodes
from examples.plain_cue import HORIZON, RISK_ODDS, SLIP, CrossingEpisode, crossing_text, make_agent, make_episodes
from examples.plain_cue_optimum import (
    RISKS,
    SureFootedAgent,
    expected_outcome,
    optimal_gate,
    optimum,
    policy_search,
    true_model,
)
from helper.commands.cli import main
from tabular_rl import solve_exact
from trajectories.shards import read_trajectories

NAMES = ["--env", "examples.plain_cue:make_episodes", "--agent", "examples.plain_cue:make_agent"]


def test_the_factory_is_a_pure_function_of_split_seed_and_index():
    first = make_episodes("train", 6, 3)
    again = make_episodes("train", 9, 3)[:6]
    assert [e.texts for e in first] == [e.texts for e in again]
    assert [e.episode_id for e in first] == [e.episode_id for e in again] and len({e.episode_id for e in first}) == 6
    assert [e.texts for e in make_episodes("test", 6, 3)] != [e.texts for e in first]
    episode = first[0]
    observation = episode.observe()
    assert observation.horizon == HORIZON and observation.features == {}
    # The risk word is said mid-sentence, with text after it, and only there: the agent and the PRM
    # read it from the text; the annotation is for the reference gate alone.
    text, risk = observation.state_text, observation.annotations["risk"]
    assert risk in text and not text.rstrip(".").endswith(risk)
    assert sum(text.count(word) for word in RISK_ODDS) == 1


def test_the_agent_slips_with_the_stated_probability_and_the_expert_never():
    episodes = make_episodes("train", 2000, 0)
    slips, seen = Counter(), Counter()
    agent = make_agent()
    for episode in episodes:
        observation = episode.observe()
        action = agent.act([observation])[0]
        assert action.actor == BASE
        risk = observation.annotations["risk"]
        seen[risk] += 1
        slips[risk] += episode.clone().step(action).reward == 0.0
        assert episode.clone().step(episode.expert_action()).reward == 1.0
    assert slips["calm"] == 0
    for risk in ("tricky", "dangerous"):
        rate, n = slips[risk] / seen[risk], seen[risk]
        assert abs(rate - SLIP[risk]) < 4 * (SLIP[risk] * (1 - SLIP[risk]) / n) ** 0.5
    assert abs(seen["calm"] / 2000 - RISK_ODDS["calm"]) < 0.05


def test_a_slip_ends_the_episode_and_interventions_at_calm_crossings_are_counted():
    episode = next(e for e in make_episodes("train", 50, 1) if e.risks[:2] == ["calm", "dangerous"])
    episode.step(episode.expert_action())  # calm: nothing to gain
    assert episode.nil_gain_interventions == 1 and not episode.done
    wrong = Action("The marker is 1000.", actor=BASE)
    result = episode.step(wrong)
    assert result.done and result.reward == 0.0 and episode.success() == 0.0
    assert episode.nil_gain_interventions == 1


@pytest.mark.parametrize(("budget", "horizon"), [(1, 3), (2, 2), (0, 3), (2, 3)])
def test_brute_force_optimum_equals_the_solver_exactly(budget, horizon):
    solved = solve_exact(true_model(horizon), budget)
    best, spent = optimum(budget, horizon)
    # Multiples of 1/4 all the way: the three computations agree to the last bit.
    assert solved.expected_success == best and solved.expected_interventions == spent
    if budget <= 1 or horizon <= 2:  # every policy enumerated (2 ** cells): tiny instances only
        assert policy_search(budget, horizon) == best


def test_the_optimum_at_the_default_horizon():
    values = [optimum(c) for c in range(HORIZON + 1)]
    assert values[0][0] == (1 - sum(RISK_ODDS[r] * SLIP[r] for r in RISK_ODDS)) ** HORIZON
    assert values[-1] == (1.0, HORIZON * (1 - RISK_ODDS["calm"]))  # every risky crossing, no calm one
    assert all(a[0] < b[0] for a, b in zip(values, values[1:]))
    for c, (best, spent) in enumerate(values):
        solved = solve_exact(true_model(), c)
        assert (solved.expected_success, solved.expected_interventions) == (best, spent)


def test_the_optimal_gate_never_spends_where_the_gain_is_nil():
    episodes = make_episodes("test", 300, 7)
    records = run_episodes(episodes, make_agent(), gate=optimal_gate(HORIZON), budget=HORIZON)
    assert sum(e.nil_gain_interventions for e in episodes) == 0
    assert all(e.success() == 1.0 for e in episodes)
    spent = sum(r.intervened for rows in records for r in rows) / len(episodes)
    assert abs(spent - optimum(HORIZON)[1]) < 0.3


@pytest.mark.parametrize("budget", [0, 1, 2, 4])
def test_the_optimal_gate_in_expectation_over_the_slips_is_the_optimum_exactly(budget):
    # Every risk history once, weighted by its probability: the gate beside the sure-footed agent, scored by
    # expected_outcome, must give the brute-force optimum's success and interventions to rounding.
    import itertools
    import random

    histories = list(itertools.product(RISKS, repeat=HORIZON))
    rng = random.Random(0)
    episodes = []
    for i, risks in enumerate(histories):
        markers = [rng.randint(10, 99) for _ in risks]
        texts = [crossing_text(rng, t, HORIZON, r, m) for t, (r, m) in enumerate(zip(risks, markers))]
        episodes.append(CrossingEpisode(f"all-{i}", f"all-{i}", list(risks), markers, texts))
    records = run_episodes(episodes, SureFootedAgent(), gate=optimal_gate(budget), budget=budget)
    weights = [float(pd.Series([RISK_ODDS[r] for r in risks]).prod()) for risks in histories]
    outcomes = [expected_outcome(e.risks, [r.intervened for r in rows]) for e, rows in zip(episodes, records)]
    assert all(len(rows) == HORIZON for rows in records)  # it never slips: every crossing is decided
    success = sum(w * o[0] for w, o in zip(weights, outcomes))
    spent = sum(w * o[1] for w, o in zip(weights, outcomes))
    assert success == pytest.approx(optimum(budget)[0], abs=1e-12)
    assert spent == pytest.approx(optimum(budget)[1], abs=1e-12)


def test_expected_outcome_by_hand():
    # Left to the agent: a tricky (3/4), then helped at a dangerous one, then a dangerous one alone (1/4).
    assert expected_outcome(["tricky", "dangerous", "dangerous"], [False, True, False]) == (0.75 * 0.25, 0.75)
    assert expected_outcome(["calm", "calm"], [False, False]) == (1.0, 0.0)


def test_end_to_end_with_a_tiny_prm(tmp_path, one_torch_thread):
    out = tmp_path / "run"
    assert main(["pipeline", "--out", str(out), "--quick", *NAMES, "--prm-model", "tiny", "--prm-pooling", "mean",
                 "--prm-target", "process", "--episodes", "40", "--eval-episodes", "12", "--budgets", "1", "2",
                 "--methods", "helper", "random"], experiments=True) == 0
    assert json.loads((out / "prm" / "prm_config.json").read_text())["pooling"] == "mean"
    frame = read_trajectories(out / "trajectories")
    assert set(frame["env"]) == {"plain_cue"} and frame["episode_id"].n_unique() == 40
    assert frame.group_by("episode_id").agg(pl.col("intervened").sum())["intervened"].max() <= 2
    sweep = pd.read_csv(out / "sweep" / "sweep.csv")
    # Every method's row says how many of its interventions fell on calm crossings.
    assert sweep["nil_gain_interventions"].notna().all()
    assert (sweep["nil_gain_interventions"] <= sweep["interventions"]).all()
    always = sweep[sweep["method"] == "always"].iloc[0]
    assert always["success"] == 1.0 and always["nil_gain_interventions"] > 0
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert summary["methods"]["helper"]["nil_gain_interventions"].keys() == {"0", "1", "2"}
