"""The embedded SmolLM2-135M as ProductQA's base agent (constrained decoding, CPU) on real questions of the
bundled slice's test split.

Asserts what is robust: every turn is well formed, and the turns are the same bytes whether the prompt cache
reuses anything and whether consistency samples are drawn. Prints the measured accuracy per question type
(a 135M model is weak here; the numbers are for reading).
"""

from __future__ import annotations

import pytest
from productqa_slice import SLICE

from agile.agents.prompt_cache import PromptKVCache
from agile.envs.phrasing import is_yes_no_question
from agile import functions as fn
from agile.executor.consistency import CONSISTENCY_KEYS
from agile.executor.episode import AgileAgent
from agile.executor.policy import LLMPolicy
from agile.rollout import run_episodes
from helper.data.environment import EnvSetup, EnvSpec

pytestmark = pytest.mark.slow

MAX_NEW_TOKENS = 24


def test_smollm2_answers_real_productqa_the_same_without_reuse_or_samples(one_torch_thread):
    spec = EnvSpec(env="productqa", agent="smollm2", data=str(SLICE), questions_per_episode=2, memory="lexical",
                   max_new_tokens=MAX_NEW_TOKENS, consistency_samples=4)
    setup = EnvSetup(spec, "test")
    base = setup.base_agent()
    episodes = setup.episodes(range(4), 0)  # one per test group
    records = run_episodes(episodes, base, budget=0, decide_after="proposal")
    accuracy: dict[str, list[float]] = {}
    for episode, rows in zip(episodes, records):
        for question, row in zip(episode.executor.questions, rows):
            accuracy.setdefault(question.type, []).append(row.reward)
            call = fn.parse_call(row.action_text)
            assert call is not None and call.name in (fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER), row.action_text
            if call.name == fn.SEARCH_PRODUCT:
                assert call.argument.startswith(f"SELECT product_id FROM `{episode.group}` WHERE"), row.action_text
            elif is_yes_no_question(question.question):
                assert call.argument in ("yes", "no"), row.action_text
            else:
                assert call.argument.strip(), row.action_text
            assert set(CONSISTENCY_KEYS) <= set(row.proposal_signals)
            print(f"{question.type:13s} reward={row.reward:.0f} gold={question.short_answer!s:.40s} "
                  f"action={row.action_text!r:.160s} signals={row.proposal_signals}")
    for qtype, rewards in accuracy.items():
        print(f"SmolLM2-135M accuracy on {qtype}: {sum(rewards) / len(rewards):.2f} ({len(rewards)} questions)")
    assert any(r.action_text.startswith(fn.SEARCH_PRODUCT) for rows in records for r in rows)

    # The same weights with no samples and a cache that keeps nothing (every prompt from its first token):
    # the same bytes. On the episodes the model answered without a search: a query prefills the whole
    # prompt once per grammar unit without the cache, minutes on a CPU (test_prompt_cache.py checks queries
    # on the tiny model).
    sampled = base.policy
    plain = LLMPolicy(sampled.model, sampled.tokenizer, MAX_NEW_TOKENS, greedy=True, decoding="constrained")
    plain.constrained.cache = PromptKVCache(sampled.model, max_tokens=1)
    plain.constrained.fit_cache = False  # kept at one token: nothing reused
    answered = [i for i, rows in enumerate(records) if not any(r.action_text.startswith(fn.SEARCH_PRODUCT)
                                                               for r in rows)]
    assert answered
    again = run_episodes(setup.episodes(answered, 0), AgileAgent(plain), budget=0, decide_after="proposal")
    assert [r.action_text.encode() for rows in again for r in rows] == \
        [r.action_text.encode() for i in answered for r in records[i]]
    assert plain.constrained.cache.reused_tokens == 0
    assert sampled.constrained.cache.reused_tokens > 0.5 * sampled.constrained.cache.prompt_tokens
