"""Common random numbers: a sampling base agent draws per decision, so every method meets the same
draws. The LLM agent samples (temperature 1) on the tiny random-initialised model with the real
tokenizer; every method's C = 0 row is the same, episode by episode, and a method's result does not
depend on which methods ran before it."""

from __future__ import annotations

import pytest

from agile import gates as B
from agile.agents.llm_agent import LLMAgent, choose_mode
from helper.data.environment import EnvConfig, Environment, EnvSpec
from helper.evaluation.evaluate import evaluate_gate


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=0)


@pytest.fixture(scope="module")
def env(tiny):
    environment = Environment(EnvConfig(EnvSpec(env="productqa", questions_per_episode=3), split="test", episodes=4, seed=7))
    # Sampling, and a wide prompt batch: any draw shared between rows or calls would show.
    environment.base = LLMAgent("tiny", lm=tiny, max_new_tokens=6, temperature=1.0, seed=3, cpu_padding=100.0)
    return environment


def _play(env, gate_for_budget, budgets, name):
    rows, per_episode, records = evaluate_gate(env, gate_for_budget, budgets, name, ci_resamples=10)
    actions = {c: [[r.action_text for r in episode] for episode in runs] for c, runs in records.items()}
    return per_episode, actions


def test_a_decision_draws_the_same_in_any_batch_and_after_any_call(env):
    observations = [episode.observe() for episode in env.episodes()]
    modes = {choose_mode(o) for o in observations}
    agent = env.base
    together = agent.act(observations)
    agent.act(observations[:1])  # other calls in between move no stream
    alone = [agent.act([o])[0] for o in reversed(observations)][::-1]
    assert together == alone, modes
    # Sampling is on: another agent seed draws other answers somewhere.
    other = LLMAgent("tiny", lm=(agent.model, agent.tokenizer), max_new_tokens=6, temperature=1.0, seed=4,
                     cpu_padding=100.0)
    assert other.act(observations) != together


def test_every_methods_c0_row_is_the_same_and_order_does_not_matter(env):
    horizon = 3
    gates = {
        "never": lambda c: B.NeverGate(c),
        "first_k": lambda c: B.FirstKGate(c),
        "random": lambda c: B.RandomGate(0.5, c, seed=1),
        "always": lambda c: B.AlwaysGate(c),
    }
    # Run order 1: each method at C = 0, 1 and the horizon (interventions in between move where a
    # shared stream would be).
    first = {name: _play(env, gate, [0, 1, horizon], name) for name, gate in gates.items()}
    # Run order 2: reversed, and the budgets too.
    second = {name: _play(env, gate, [horizon, 1, 0], name) for name, gate in reversed(gates.items())}
    # Each episode's group is its product group (what the report resamples above episodes).
    assert {row["group"] for row in first["never"][0]} <= set(env.source.group_names)
    reference = first["never"][1][0]
    for name in gates:
        assert first[name][1][0] == reference, name  # the same actions at C = 0, decision by decision
        assert second[name][1][0] == reference, name
        for c in (1, horizon):
            assert first[name][1][c] == second[name][1][c], (name, c)
        key = lambda rows: sorted((r["budget"], r["episode_id"], r["success"], r["interventions"]) for r in rows)
        assert key(first[name][0]) == key(second[name][0]), name
    # The runs did intervene (so the test could see a shared stream move): always used its budget.
    assert any(episode != reference_episode for episode, reference_episode in
               zip(first["always"][1][horizon], reference))


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_per_decision_noise_samples_the_softmax(temperature):
    import math

    import torch

    from agile.agents.llm_agent import _DecisionGumbel

    # Probabilities 1/6, 2/6, 3/6 at T = 1; at T = 2 they go as sqrt(1), sqrt(2), sqrt(3).
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0]])).repeat(20_000, 1)
    noise = _DecisionGumbel(list(range(20_000)), temperature, prompt_width=5)
    chosen = noise(torch.zeros((20_000, 7), dtype=torch.long), logits).argmax(dim=1)
    expected = torch.tensor([1.0, 2.0, 3.0]) ** (1 / temperature)
    expected = expected / expected.sum()
    frequencies = torch.bincount(chosen, minlength=3) / 20_000
    assert torch.allclose(frequencies, expected, atol=0.015), (frequencies, expected)
    # The draw of a row is its seed's and position's alone: the same in a batch of one.
    alone = noise.__class__([7], temperature, prompt_width=5)(torch.zeros((1, 7), dtype=torch.long), logits[:1])
    assert alone.argmax().item() == chosen[7].item() and not math.isnan(alone.sum().item())
