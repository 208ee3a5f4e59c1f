"""Common random numbers: the base agents' random draws are per decision (the simulator's right-or-wrong
draw, the LLM agent's consistency samples), so every method meets the same draws: every method's C = 0 row
is the same, episode by episode, and a method's result does not depend on which methods ran before it.

ProductQA on the AGILE executor (bundled slice, lexical memory): the simulator with a memory boost (help
changes later draws' odds), and the tiny random LLM whose consistency samples a proposal gate reads.
"""

from __future__ import annotations

import pandas as pd
import pytest
from productqa_slice import SLICE

from helper.gates import simple as B
from agile.agents.simulator_agent import SimulatorAgent
from agile.executor.consistency import CONSISTENCY_KEYS
from helper.data.environment import EnvConfig, Environment, EnvSpec
from helper.evaluation.play import evaluate_gate

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


# -- any agent: the loop hands a per-decision seed; the sweep checks its C = 0 rows ----------------------
def plugin_sweep(tmp_path, agent: str) -> dict:
    import json
    import warnings

    from helper.evaluation.sweep import SweepConfig
    from helper.evaluation.sweep import run as run_sweep

    cfg = SweepConfig(spec=EnvSpec(env="crn_plugin:make_episodes", agent=f"crn_plugin:{agent}"),
                      out=str(tmp_path / agent), episodes=60, budgets=[0, 1, 2],
                      methods=["never", "always", "first_k", "random"], ci_resamples=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run_sweep(cfg)
    per_episode = pd.read_csv(tmp_path / agent / "episodes.csv")
    assert json.loads((tmp_path / agent / "summary.json").read_text())["c0_check"] == summary["c0_check"]
    return summary, per_episode, [str(w.message) for w in caught if "C = 0 rows differ" in str(w.message)]


def test_a_plugin_agent_drawing_from_the_handed_seed_gives_equal_c0_rows(tmp_path):
    summary, per_episode, warned = plugin_sweep(tmp_path, "keyed_agent")
    at_zero = per_episode[per_episode["budget"] == 0].pivot(index="episode_id", columns="method", values="success")
    assert set(at_zero.columns) == {"never", "first_k", "random"}
    assert (at_zero.nunique(axis=1) == 1).all()  # episode by episode
    assert at_zero["never"].nunique() > 1  # the agent did draw (outcomes vary across episodes)
    assert summary["c0_check"]["equal"] and not warned


def test_a_plugin_agent_with_its_own_generator_is_named_by_the_sweep(tmp_path):
    summary, per_episode, warned = plugin_sweep(tmp_path, "own_random_agent")
    check = summary["c0_check"]
    assert not check["equal"] and check["episodes_differing"] > 0 and check["episodes"] == 60
    assert check["success_min"][1] < check["success_max"][1]
    assert len(warned) == 1 and f"{check['success_min'][1]:.3f}" in warned[0] and check["success_max"][0] in warned[0]


def test_the_handed_seed_is_a_function_of_the_decision_alone():
    from agile.protocol import Observation
    from agile.rollout import decide, decision_seed
    from crn_plugin import keyed_agent, make_episodes

    seen = []

    class Spy:
        name = "spy"

        def act(self, observations):
            seen.extend((o.episode_id, o.step, o.seed) for o in observations)
            return keyed_agent().act(observations)

    episodes = make_episodes("test", 3, 0)
    decide(episodes, [Spy()] * 3, seed=5)
    decide(episodes[::-1], [Spy()] * 3, seed=5)  # another order, the next step
    assert seen == [(e, s, decision_seed(5, e, s)) for e, s in
                    [("test-0-0", 0), ("test-0-1", 0), ("test-0-2", 0), ("test-0-2", 1), ("test-0-1", 1), ("test-0-0", 1)]]
    assert len({seed for _, _, seed in seen}) == 6 and decision_seed(6, "test-0-0", 0) != seen[0][2]
    with pytest.raises(ValueError, match="has no seed"):
        Observation("e", "env", "t", 0, "s", 1).rng()
