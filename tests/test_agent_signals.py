"""The LLM agent's free confidence signals: right values (against a full forward pass), the same
through the prompt cache, and no change to the actions it chooses."""

from __future__ import annotations

import math

import pytest
import torch

from agile.agents.llm_agent import SIGNAL_KEYS, LLMAgent, choose_mode
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa_env import ProductQASource
from agile.protocol import Action


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=0)


def _observations(count: int = 40):
    """Observations of every mode the model answers: yes/no, free text, query, answer after a search."""
    source = ProductQASource(default_catalog_dir(seed=0), "test")
    found = []
    for episode in source.episodes(range(count), 1, 2):
        while not episode.done:
            observation = episode.observe()
            found.append(observation)
            if choose_mode(observation) == "sql":
                probe = episode.clone()
                probe.step(Action(f"[SearchProduct] {probe.question.gold_sql}"))
                found.append(probe.observe())
            episode.step(episode.expert_action())
    modes = {choose_mode(o) for o in found}
    assert {"yesno", "sql", "ids"} <= modes
    return found[:16]


def _agent(tiny, **kwargs):
    return LLMAgent("tiny", lm=tiny, max_new_tokens=6, cache_size=0, **kwargs)


def test_signals_are_finite_and_ordered(tiny):
    observations = _observations()
    actions = _agent(tiny, prefix_cache_tokens=0).act(observations)
    answered = [a for a in actions if a.signals]
    assert len(answered) >= len(actions) // 2
    for action in answered:
        assert tuple(action.signals) == SIGNAL_KEYS
        assert all(math.isfinite(v) for v in action.signals.values())
        assert action.signals["answer_logprob"] <= 0
        assert action.signals["margin"] >= 0
        assert action.signals["entropy"] >= 0
    # Answers without a model call ("none" after an empty search) carry no signals.
    assert all(not a.signals for a in actions if a not in answered)


def test_signals_equal_a_full_forward_pass(tiny):
    """Brute force: the prompt plus the answer's tokens in one pass give the same numbers."""
    model, tokenizer = tiny
    agent = _agent(tiny, prefix_cache_tokens=0)
    observations = _observations()
    actions = agent.act(observations)
    checked = {"yesno": 0, "generated": 0}
    for observation, action in zip(observations, actions):
        mode = agent.modes([observation])[0]
        if not action.signals:
            continue
        prompt = tokenizer(agent.prompt(observation, mode), add_special_tokens=False)["input_ids"]
        if mode == "yesno":
            with torch.no_grad():
                log_probs = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
            yes = float(torch.logsumexp(log_probs[agent._yes], 0))
            no = float(torch.logsumexp(log_probs[agent._no], 0))
            chosen = yes if action.text.endswith("yes") else no
            assert action.signals["answer_logprob"] == pytest.approx(chosen, abs=1e-4)
            assert action.signals["margin"] == pytest.approx(abs(yes - no), abs=1e-4)
            p = 1 / (1 + math.exp(no - yes))
            assert action.signals["entropy"] == pytest.approx(-p * math.log(p) - (1 - p) * math.log(1 - p), abs=1e-4)
            checked["yesno"] += 1
            continue
        # Greedy continuation by hand, one token at a time over the full sequence.
        ids, chosen, stops, eos = list(prompt), [], agent._stops(mode), agent._eos_ids()
        first = None
        for _ in range(agent.max_new_tokens):
            with torch.no_grad():
                log_probs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
            first = log_probs if first is None else first
            token = int(log_probs.argmax())
            chosen.append(float(log_probs[token]))
            ids.append(token)
            if token in stops or token in eos:
                break
        top = first.topk(2).values
        assert action.signals["answer_logprob"] == pytest.approx(sum(chosen) / len(chosen), abs=1e-4)
        assert action.signals["margin"] == pytest.approx(float(top[0] - top[1]), abs=1e-4)
        assert action.signals["entropy"] == pytest.approx(float(-(first.exp() * first).sum()), abs=1e-4)
        checked["generated"] += 1
    assert checked["yesno"] and checked["generated"]


def test_prompt_cache_gives_the_same_signals(tiny):
    observations = _observations()
    plain = _agent(tiny, prefix_cache_tokens=0, max_batch=5, cpu_padding=100.0).act(observations)
    cached = _agent(tiny).act(observations)
    assert [a.text for a in cached] == [a.text for a in plain]
    for a, b in zip(cached, plain):
        assert a.signals.keys() == b.signals.keys()
        for key in a.signals:
            assert a.signals[key] == pytest.approx(b.signals[key], abs=1e-4), key


@pytest.mark.parametrize("prefix_cache_tokens", [0, None])
def test_actions_are_byte_identical_with_and_without_signals(tiny, prefix_cache_tokens):
    observations = _observations()
    with_signals = _agent(tiny, prefix_cache_tokens=prefix_cache_tokens).act(observations)
    without = _agent(tiny, prefix_cache_tokens=prefix_cache_tokens, signals=False).act(observations)
    assert [a.text.encode() for a in with_signals] == [a.text.encode() for a in without]
    assert all(not a.signals for a in without) and any(a.signals for a in with_signals)


@pytest.mark.slow
def test_smollm2_actions_are_byte_identical_with_and_without_signals():
    from agile.models import load_causal_lm

    lm = load_causal_lm("smollm2", device="cpu")
    observations = _observations()[:10]
    for prefix_cache_tokens in (0, None):
        kwargs = {"lm": lm, "max_new_tokens": 16, "cache_size": 0, "prefix_cache_tokens": prefix_cache_tokens}
        with_signals = LLMAgent("smollm2", **kwargs).act(observations)
        without = LLMAgent("smollm2", signals=False, **kwargs).act(observations)
        assert [a.text.encode() for a in with_signals] == [a.text.encode() for a in without]
        assert all(a.signals["answer_logprob"] <= 0 for a in with_signals if a.signals)
