"""The rollout loop on ProductQA's executor episodes: budget invariants, exploration, gates, lockstep
batching, counterfactuals, and the scripted agents that drive it (simulator, oracle).

The simulator has known dynamics, so the loop's bookkeeping can be checked exactly; the episodes are the
AGILE executor's on the bundled ProductQA slice, with lexical memory (no model loads, only a tokenizer).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from productqa_slice import SLICE

from agile.agents.oracle_agent import OracleAgent
from agile.agents.simulator_agent import SimulatorAgent
from agile.executor.episode import AgileSource
from agile.protocol import HUMAN, Observation
from agile.rollout import run_episodes

N = 6  # questions per episode in these tests


@pytest.fixture(scope="module")
def source():
    return AgileSource(SLICE, "train", model=None, memory="lexical")


def episodes(source, n, seed=0, qpe=N):
    return source.episodes(range(n), seed, qpe)


class RandomGate:
    """A gate that says yes with probability ``q``; it records the budgets it was asked with."""

    def __init__(self, q: float, seed: int):
        self.q, self.rng, self.asked = q, random.Random(seed), []

    def should_intervene(self, observation: Observation, budget_left: int) -> bool:
        self.asked.append(budget_left)
        return self.rng.random() < self.q


class StepGate:
    """Says yes at ``steps``; records (episode, step, budget_left) of every question it is asked."""

    def __init__(self, steps):
        self.steps, self.asked = set(steps), []

    def should_intervene(self, observation, budget_left):
        self.asked.append((observation.episode_id, observation.step, budget_left))
        return observation.step in self.steps


# -- the loop -------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budget=st.integers(0, 7),
    q=st.floats(0.5, 1.0),
    explore=st.one_of(st.none(), st.floats(0.0, 1.0)),
    seed=st.integers(0, 10_000),
)
def test_budget_is_never_exceeded(source, budget, q, explore, seed):
    gate = RandomGate(q, seed)
    records = run_episodes(episodes(source, 4, seed), SimulatorAgent(seed=seed), gate=gate,
                           budget=budget, explore_p=explore, rng_seed=seed)
    assert 0 not in gate.asked  # the gate is only consulted while budget is left
    for rows in records:
        assert len(rows) == N
        assert sum(r.intervened for r in rows) <= budget
        left = budget
        for r in rows:
            assert r.budget_left == left >= 0
            assert r.actor == (HUMAN if r.intervened else "base")
            left -= r.intervened
        assert [r.done for r in rows] == [False] * (N - 1) + [True]
        assert len({r.success for r in rows}) == 1
        assert rows[0].success == pytest.approx(sum(r.reward for r in rows) / N)


def test_explore_zero_never_intervenes_explore_one_spends_budget_first(source):
    for budget in (0, 2, N + 3):
        none = run_episodes(episodes(source, 3), SimulatorAgent(), budget=budget, explore_p=0.0)
        assert not any(r.intervened for rows in none for r in rows)
        always = run_episodes(episodes(source, 3), SimulatorAgent(), budget=budget, explore_p=1.0)
        for rows in always:
            assert [r.intervened for r in rows] == [s < min(budget, N) for s in range(N)]
            assert all(r.reward == 1.0 for r in rows if r.intervened)


def test_gate_protocol_decides_and_explore_p_is_recorded(source):
    gate = StepGate({2, 4})
    records = run_episodes(episodes(source, 3), SimulatorAgent(), gate=gate, budget=5)
    for rows in records:
        assert [r.step for r in rows if r.intervened] == [2, 4]
        assert {r.explore_p for r in rows} == {0.0}
        # Asked once per decision, in order, with the loop's own count of what is left (5, less each yes).
        mine = [(step, left) for episode, step, left in gate.asked if episode == rows[0].episode_id]
        assert mine == [(0, 5), (1, 5), (2, 5), (3, 4), (4, 4), (5, 3)]
    # A gate that says yes more often than the budget allows is overruled once it is spent, and no longer asked.
    capped = StepGate({2, 4})
    for rows in run_episodes(episodes(source, 2), SimulatorAgent(), gate=capped, budget=1):
        assert [r.step for r in rows if r.intervened] == [2]
    assert sorted(step for _, step, _ in capped.asked) == [0, 0, 1, 1, 2, 2]  # lockstep: both episodes at once
    mixed = run_episodes(episodes(source, 2), SimulatorAgent(), budget=1, explore_p=[0.0, 1.0])
    assert [rows[0].explore_p for rows in mixed] == [0.0, 1.0]
    assert [rows[0].intervened for rows in mixed] == [False, True]


def test_lockstep_equals_one_at_a_time(source):
    agent = SimulatorAgent(memory_boost=0.2, seed=3)
    together = run_episodes(episodes(source, 6, seed=5), agent, budget=2, explore_p=0.4, rng_seed=9)
    alone = [run_episodes([e], agent, budget=2, explore_p=0.4, rng_seed=9)[0]
             for e in episodes(source, 6, seed=5)]
    assert [[r.to_row() for r in rows] for rows in together] == [[r.to_row() for r in rows] for rows in alone]
    assert together[0][0].horizon == N


def test_counterfactuals_match_brute_force_and_are_monotone(source):
    # memory_boost: advice filed in memory raises later accuracy, so where help lands matters.
    agent = SimulatorAgent(memory_boost=0.3, seed=1)
    records = run_episodes(episodes(source, 3, seed=2), agent, budget=0, counterfactual=True)
    fresh = episodes(source, 3, seed=2)
    for rows, episode in zip(records, fresh):
        for row in rows:
            # with no interventions the base branch is the run itself
            assert row.cf_base_success == row.success
            assert row.cf_intervene_success >= row.cf_base_success  # help never hurts here
        assert any(row.cf_intervene_success > row.cf_base_success for row in rows)
        # brute force for one step: clone at step 2, intervene, base to the end
        probe = episode.clone()
        for _ in range(2):
            probe.step(agent.act([probe.observe()], episodes=[probe])[0])
        probe.step(probe.expert_action())
        while not probe.done:
            probe.step(agent.act([probe.observe()], episodes=[probe])[0])
        assert rows[2].cf_intervene_success == probe.success()


# -- scripted agents --------------------------------------------------------------------------


def test_simulator_probabilities_are_its_true_rates(source):
    agent = SimulatorAgent({"fact_qa": 0.7, "search_qa": 0.2, "reasoning_qa": 0.5}, seed=4)
    eps = episodes(source, 240, seed=7, qpe=1)
    observations = [e.observe() for e in eps]
    actions = agent.act(observations, episodes=eps)
    by_p: dict[float, list[float]] = {}
    for episode, obs, action in zip(eps, observations, actions):
        by_p.setdefault(agent.success_probability(obs), []).append(episode.step(action).reward)
    assert set(by_p) == {0.7, 0.2, 0.5}
    for p, rewards in by_p.items():
        assert abs(sum(rewards) / len(rewards) - p) < 4 * (p * (1 - p) / len(rewards)) ** 0.5 + 0.02
    # same draws whatever the batch
    single = [agent.act([o], episodes=[e])[0] for o, e in zip(observations[:20], episodes(source, 20, seed=7, qpe=1))]
    assert single == actions[:20]
    with pytest.raises(ValueError, match="episodes"):
        agent.act(observations[:1])


def test_oracle_agent_is_always_right(source):
    eps = episodes(source, 3)
    records = run_episodes(eps, OracleAgent())
    assert all(r.reward == 1.0 and r.actor == HUMAN for rows in records for r in rows)
    assert all(record.advised for e in eps for record in e.executor.records)
    with pytest.raises(ValueError, match="episodes"):
        OracleAgent().act([eps[0].executor.observation])
