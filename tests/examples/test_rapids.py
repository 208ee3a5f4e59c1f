"""The rapids example: its factory contract, its exact optimum against brute force and the solver, the
room a threshold leaves, and the optimal gate played with the real agent."""

import itertools
import random
import re
from collections import Counter

import numpy as np
import pytest

from helper.gates.simple import ScoreThresholdGate
from agile.protocol import BASE, Action
from agile.rollout import run_episodes
from examples.plain_cue import SLIP
from examples.rapids import (
    AT_THE_RAPIDS,
    HORIZON,
    RAPIDS,
    RAPIDS_AHEAD,
    RISK_ODDS_BY_STEP,
    RapidsEpisode,
    crossing_text,
    make_agent,
    make_episodes,
)
from examples.rapids_optimum import (
    RISKS,
    SureFootedAgent,
    best_threshold,
    expected_outcome,
    optimal_gate,
    optimum,
    outcome_score,
    policy_point,
    policy_search,
    priced_frontier,
    process_score,
    room,
    room_at_spend,
    threshold_curve,
    threshold_success,
    true_model,
)
from tabular_rl import solve_exact

# The figures the module docstrings and the design quote, to three decimals (C = 1 .. 5).
OPTIMUM = (0.301, 0.463, 0.615, 0.792, 0.940)
PROCESS_THRESHOLD = (0.293, 0.418, 0.418, 0.655, 0.904)
ROOM = (0.008, 0.045, 0.197, 0.137, 0.036)
NEVER = 0.116


def every_history():
    """Every risk sequence a river can show, with its probability, as episodes with real texts."""
    rng = random.Random(0)
    episodes, weights = [], []
    for i, risks in enumerate(itertools.product(RISKS, repeat=HORIZON)):
        weight = float(np.prod([RISK_ODDS_BY_STEP[t][r] for t, r in enumerate(risks)]))
        if weight == 0:
            continue
        markers = [rng.randint(10, 99) for _ in risks]
        texts = [crossing_text(rng, t, HORIZON, r, m) for t, (r, m) in enumerate(zip(risks, markers))]
        episodes.append(RapidsEpisode(f"all-{i}", f"all-{i}", list(risks), markers, texts))
        weights.append(weight)
    return episodes, weights


def in_expectation(gate, budget: int) -> tuple[float, float]:
    """(success, interventions) of ``gate`` in expectation over every history and every slip."""
    episodes, weights = every_history()
    records = run_episodes(episodes, SureFootedAgent(), gate=gate, budget=budget)
    outcomes = [expected_outcome(e.risks, [r.intervened for r in rows]) for e, rows in zip(episodes, records)]
    return sum(w * o[0] for w, o in zip(weights, outcomes)), sum(w * o[1] for w, o in zip(weights, outcomes))


def test_the_factory_is_a_pure_function_of_split_seed_and_index():
    first = make_episodes("train", 6, 3)
    again = make_episodes("train", 9, 3)[:6]
    assert [(e.texts, e.risks, e.markers) for e in first] == [(e.texts, e.risks, e.markers) for e in again]
    assert [e.episode_id for e in first] == [f"rapids-train-3-{i}" for i in range(6)]
    assert [e.task_id for e in first] == [f"train-{i}" for i in range(6)]
    assert [e.texts for e in make_episodes("test", 6, 3)] != [e.texts for e in first]
    assert [e.texts for e in make_episodes("train", 6, 4)] != [e.texts for e in first]
    observation = first[0].observe()
    assert observation.env == "rapids" and observation.horizon == HORIZON and observation.features == {}


def test_each_text_says_its_own_risk_word_once_and_where_the_rapids_are():
    assert not any(word in cue for cue in RAPIDS_AHEAD + AT_THE_RAPIDS for word in RISKS)
    agent_reads = re.compile(r"\b(" + "|".join(SLIP) + r")\b")
    offsets = set()
    for episode in make_episodes("train", 300, 0):
        for t, (text, risk) in enumerate(zip(episode.texts, episode.risks)):
            # The risk word is said mid-sentence, once, and it is the annotated one: what the agent reads.
            assert sum(text.count(word) for word in RISKS) == 1 and agent_reads.search(text).group(1) == risk
            assert not text.rstrip(".").endswith(risk)
            offsets.add(text.index(risk))
            at_rapids = t >= HORIZON - RAPIDS
            assert any(cue in text for cue in AT_THE_RAPIDS) == at_rapids
            assert any(cue in text for cue in RAPIDS_AHEAD) == (not at_rapids)
        assert episode.observe().annotations == {"risk": episode.risks[0]}
    assert len(offsets) > 10  # no fixed place to find it


def test_the_risks_at_each_crossing_follow_their_odds():
    episodes = make_episodes("train", 3000, 1)
    for t, odds in enumerate(RISK_ODDS_BY_STEP):
        seen = Counter(e.risks[t] for e in episodes)
        for risk, p in odds.items():
            if p == 0:
                assert seen[risk] == 0
            else:
                assert abs(seen[risk] / 3000 - p) < 4 * (p * (1 - p) / 3000) ** 0.5, (t, risk)


def test_rewards_are_dense_a_slip_ends_the_episode_and_the_expert_is_right():
    episode = next(e for e in make_episodes("train", 100, 2) if e.risks[:2] == ["calm", "tricky"])
    assert episode.step(episode.expert_action()).reward == 1.0 and episode.nil_gain_interventions == 1
    result = episode.step(Action("The marker is 1000.", actor=BASE))
    assert result.done and result.reward == 0.0 and episode.success() == 0.0
    assert episode.nil_gain_interventions == 1


@pytest.mark.parametrize(("budget", "horizon"), [(1, 3), (2, 3), (1, 4), (2, 2), (0, 3)])
def test_the_optimum_equals_the_best_policy_found_by_enumeration(budget, horizon):
    # Decimal odds: the two sums are taken in different orders, so they agree to rounding, not to the bit.
    assert policy_search(budget, horizon) == pytest.approx(optimum(budget, horizon)[0], abs=1e-12)


@pytest.mark.parametrize("horizon", [HORIZON, 3])
def test_the_optimum_equals_the_solver_on_the_true_model(horizon):
    for c in range(horizon + 2):
        solved, (best, spent) = solve_exact(true_model(horizon), c), optimum(c, horizon)
        assert solved.expected_success == pytest.approx(best, abs=1e-12)
        assert solved.expected_interventions == pytest.approx(spent, abs=1e-12)


def test_the_quoted_figures_and_the_room_a_threshold_leaves():
    never = np.prod([sum(p * (1 - SLIP[r]) for r, p in odds.items()) for odds in RISK_ODDS_BY_STEP])
    assert optimum(0) == (pytest.approx(never, abs=1e-15), 0.0) and round(never, 3) == NEVER
    assert optimum(HORIZON)[0] == pytest.approx(1.0)
    for c in range(1, 6):
        thresholds = best_threshold(c)
        assert round(optimum(c)[0], 3) == OPTIMUM[c - 1]
        assert round(thresholds["process"], 3) == PROCESS_THRESHOLD[c - 1]
        assert round(room(c), 3) == ROOM[c - 1]
        assert max(thresholds.values()) <= optimum(c)[0] + 1e-12  # no threshold beats the optimum
    assert room(3) >= 0.05 and room(4) >= 0.05


def test_at_a_spend_the_frontier_holds_every_gate_and_a_threshold_is_near_it():
    frontier = priced_frontier()
    spends, successes = zip(*frontier)
    assert spends[0] == 0.0 and successes[0] == pytest.approx(optimum(0)[0]) and successes[-1] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(successes, successes[1:]))  # more spend, more success, concave between
    slopes = np.diff(successes) / np.diff(spends)
    assert all(a >= b - 1e-12 for a, b in zip(slopes, slopes[1:]))
    # A no-cap policy's point is its success by the capped induction with a budget no river can spend.
    wants = lambda t, risk: process_score(t, risk) >= 0.5 or t >= HORIZON - 1  # noqa: E731
    assert policy_point(wants)[0] == pytest.approx(threshold_success(HORIZON, wants), abs=1e-15)
    # Every capped optimum, history-dependent as it is, lies on or under the no-cap frontier at its own spend:
    # without a cap the best gate at a price per call needs no budget state.
    for c in range(1, 6):
        success, spent = optimum(c)
        assert success <= np.interp(spent, spends, successes) + 1e-12
    for name in ("process", "outcome"):
        for spend, success in threshold_curve(name):
            assert success <= np.interp(spend, spends, successes) + 1e-12
    # Measured: the timing matters under a cap (ROOM) and next to nothing at a spend.
    rooms = [room_at_spend(s)["room"] for s in np.linspace(0.0, HORIZON, 25)]
    assert min(rooms) >= -1e-12 and round(max(rooms), 3) == 0.036


@pytest.mark.parametrize("budget", [1, 3])
def test_the_gates_in_expectation_over_every_history_give_the_exact_figures(budget):
    # The reference gate through the real rollout, beside the sure-footed agent, scored exactly.
    success, spent = in_expectation(optimal_gate(budget), budget)
    assert (success, spent) == (pytest.approx(optimum(budget)[0], abs=1e-12),
                                pytest.approx(optimum(budget)[1], abs=1e-12))
    # A threshold on the ideal outcome verifier, as a gate, against threshold_success's induction.
    level = outcome_score(HORIZON - 1, "tricky")
    gate = ScoreThresholdGate(lambda o: outcome_score(o.step, o.annotations["risk"]), level, budget)
    expected = threshold_success(budget, lambda t, r: outcome_score(t, r) <= level)
    assert in_expectation(gate, budget)[0] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("budget", [3, 4])
def test_the_optimal_gate_with_the_real_agent_keeps_its_cap_and_reaches_the_optimum(budget):
    episodes = make_episodes("test", 2000, 5)
    records = run_episodes(episodes, make_agent(), gate=optimal_gate(budget), budget=budget)
    used = [sum(r.intervened for r in rows) for rows in records]
    assert max(used) <= budget
    success = np.array([e.success() for e in episodes])
    best = optimum(budget)[0]
    assert abs(success.mean() - best) < 4 * (best * (1 - best) / len(episodes)) ** 0.5
    assert abs(np.mean(used) - optimum(budget)[1]) < 4 * np.std(used) / len(used) ** 0.5
