"""The ProductQA LLM agent's confidence signals (``Action.signals``, logged as ``proposal_signals``): which
turns carry which, their values against a full forward pass, and where nothing competed, no key at all.

The function's log-probabilities and margin are checked against brute force in test_agile_constrained.py;
here, the answer's, and what reaches the logged rows.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from productqa_slice import SLICE

from agile.envs.phrasing import is_yes_no_question
from agile import functions as fn
from agile.executor.episode import AgileAgent, AgileSource
from agile.executor.policy import LLMPolicy
from agile.models import load_causal_lm
from agile.rollout import run_episodes

SIGNAL_KEYS = {"function_margin", "answer_margin", "answer_logprob"}


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


@functools.cache
def tiny(seed: int):
    # On this slice seed 1 searches the questions not worded yes/no, seed 0 answers them.
    return load_causal_lm("tiny", device="cpu", seed=seed)


@pytest.fixture(scope="module")
def source():
    return AgileSource(SLICE, "train", model=None, memory="lexical")


def _agent(lm) -> AgileAgent:
    return AgileAgent(LLMPolicy(*lm, max_new_tokens=6, greedy=True, decoding="constrained"))


@pytest.mark.parametrize("seed, expected", [(0, {"yes/no", "answer"}), (1, {"yes/no", "search"})])
def test_logged_signals_are_finite_and_absent_where_nothing_competed(source, seed, expected):
    episodes = source.episodes(range(6), 0, 3)
    records = run_episodes(episodes, _agent(tiny(seed)), budget=0, decide_after="proposal")
    kinds = set()
    for episode, rows in zip(episodes, records):
        for question, row in zip(episode.executor.questions, rows):
            signals = row.proposal_signals
            assert set(signals) <= SIGNAL_KEYS and all(math.isfinite(v) for v in signals.values())
            assert all(signals[k] >= 0 for k in ("function_margin", "answer_margin") if k in signals)
            if is_yes_no_question(question.question):
                # Only [PredictAnswer] is offered (a search cannot say yes or no): no function margin.
                assert set(signals) == {"answer_margin", "answer_logprob"}, row.action_text
                kinds.add("yes/no")
            elif row.action_text.startswith(fn.SEARCH_PRODUCT):
                assert set(signals) == {"function_margin"}  # a query is built, not chosen among lines
                kinds.add("search")
            else:
                assert set(signals) == SIGNAL_KEYS
                kinds.add("answer")
            assert signals.get("answer_logprob", 0.0) <= 0
    assert kinds == expected


def test_yes_no_answer_signals_equal_a_full_forward_pass(source):
    model, tokenizer = tiny(1)
    agent = _agent(tiny(1))
    checked = 0
    for episode in source.episodes(range(4), 0, 2):
        while not episode.done:
            executor = episode.executor
            prompt = executor.prompt_ids()
            (action,) = agent.act([episode.observe()], episodes=[episode])
            if is_yes_no_question(executor.question.question):
                lines = {a: tokenizer(f"{fn.PREDICT_ANSWER} {a}\n", add_special_tokens=False)["input_ids"]
                         for a in ("yes", "no")}
                brute = {a: _logprob(model, prompt, ids) for a, ids in lines.items()}
                best = max(brute, key=brute.get)
                assert action.text == f"{fn.PREDICT_ANSWER} {best}\n" and list(action.token_ids) == lines[best]
                assert action.signals["answer_margin"] == pytest.approx(abs(brute["yes"] - brute["no"]), abs=1e-4)
                assert action.signals["answer_logprob"] == pytest.approx(brute[best] / len(lines[best]), abs=1e-4)
                checked += 1
            episode.step(action)
    assert checked >= 4


@torch.no_grad()
def _logprob(model, prompt, continuation):
    log_probs = torch.log_softmax(model(input_ids=torch.tensor([prompt + continuation])).logits[0].float(), -1)
    return float(sum(log_probs[len(prompt) - 1 + j, t] for j, t in enumerate(continuation)))
