"""Common random numbers: the base agents' random draws are per decision (the simulator's right-or-wrong
draw, the LLM agent's consistency samples), so every method meets the same draws: every method's C = 0 row
is the same, episode by episode, and a method's result does not depend on which methods ran before it.

ProductQA on the AGILE executor (bundled slice, lexical memory): the simulator with a memory boost (help
changes later draws' odds), and the tiny random LLM whose consistency samples a proposal gate reads.
"""

from __future__ import annotations

import pytest
from productqa_slice import SLICE

from agile import gates as B
from agile.agents.simulator_agent import SimulatorAgent
from agile.executor.consistency import CONSISTENCY_KEYS
from helper.data.environment import EnvConfig, Environment, EnvSpec
from helper.evaluation.evaluate import evaluate_gate

HORIZON = 3


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def environment(agent: str, **spec) -> Environment:
    return Environment(EnvConfig(EnvSpec(env="productqa", agent=agent, data=str(SLICE), memory="lexical",
                                         questions_per_episode=HORIZON, **spec), split="test", episodes=4, seed=7))


STATE_GATES = {
    "never": lambda c: B.NeverGate(c),
    "first_k": lambda c: B.FirstKGate(c),
    "random": lambda c: B.RandomGate(0.5, c, seed=1),
    "always": lambda c: B.AlwaysGate(c),
}


def unsure(c):
    """Intervene where at most half of the consistency samples agree with the greedy turn."""
    return B.ScoreThresholdGate(lambda observation, proposal: proposal.signals["consistency_agree"], 0.5, c,
                                name="unsure", decide_after="proposal")


def row(record):
    """A decision as (action, consistency signals, intervened). The margins are left out: another
    prompt-cache history rounds them otherwise in the last bits."""
    consistency = {k: v for k, v in record.proposal_signals.items() if k in CONSISTENCY_KEYS}
    return record.action_text, consistency, record.intervened


def sweep(env, gates, order, budgets):
    """Per method (run in ``order``): every budget's rows per episode, and the per-episode results."""
    out = {}
    for name in order:
        _, per_episode, records = evaluate_gate(env, gates[name], budgets, name, ci_resamples=10)
        out[name] = ({c: [[row(r) for r in rows] for rows in runs] for c, runs in records.items()},
                     sorted((r["budget"], r["episode_id"], r["success"], r["interventions"]) for r in per_episode))
    return out


def check(make_env, gates):
    names = list(gates)
    # Order 1: each method at C = 0, 1 and the horizon (interventions in between move where a shared stream
    # would be). Order 2: the methods and the budgets reversed, on a fresh environment (the LLM policy's
    # memo of turns met before would otherwise hand order 2 the draws of order 1).
    first = sweep(make_env(), gates, names, [0, 1, HORIZON])
    second = sweep(make_env(), gates, names[::-1], [HORIZON, 1, 0])
    reference = [[text for text, _, _ in rows] for rows in first["never"][0][0]]
    for name in names:
        for run in (first, second):
            # The same actions at C = 0, decision by decision.
            assert [[text for text, _, _ in rows] for rows in run[name][0][0]] == reference, name
        assert first[name] == second[name], name  # every budget, signals and per-episode results included
    # The runs did intervene (so a shared stream would have moved): always used its budget.
    assert first["always"][0][HORIZON] != first["never"][0][HORIZON]
    return first


def test_a_simulator_decision_draws_the_same_in_any_batch_and_after_any_call():
    env = environment("simulator", memory_boost=0.3)
    agent = env.base
    assert isinstance(agent, SimulatorAgent)
    episodes = env.episodes(16)
    observations = [e.observe() for e in episodes]
    together = agent.act(observations, episodes=episodes)
    agent.act(observations[:1], episodes=episodes[:1])  # other calls in between move no stream
    alone = [agent.act([o], episodes=[e])[0] for o, e in zip(observations[::-1], episodes[::-1])][::-1]
    assert together == alone
    # Another agent seed draws otherwise somewhere.
    other = SimulatorAgent(agent.accuracy, memory_boost=0.3, seed=agent.seed + 1)
    assert other.act(observations, episodes=episodes) != together


def test_every_methods_c0_row_is_the_same_and_order_does_not_matter_simulator():
    check(lambda: environment("simulator", memory_boost=0.3), STATE_GATES)


def test_consistency_samples_are_common_random_numbers_too():
    first = check(lambda: environment("tiny", max_new_tokens=6, consistency_samples=4),
                  {**STATE_GATES, "unsure": unsure})
    decisions = [d for c in (0, 1, HORIZON) for episode in first["unsure"][0][c] for d in episode]
    assert len({signals["consistency_agree"] for _, signals, _ in decisions}) > 1
    # With a budget as long as the episode, the gate intervened where the samples disagreed, and only there.
    unbound = [d for episode in first["unsure"][0][HORIZON] for d in episode]
    assert [intervened for _, _, intervened in unbound] == [s["consistency_agree"] <= 0.5 for _, s, _ in unbound]
    assert 0 < sum(intervened for _, _, intervened in unbound) < len(unbound)
