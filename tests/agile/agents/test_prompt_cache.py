"""The prompt key/value cache: same logits and turns as without it, real reuse, bounded size.

Its own operations on random token ids, then the constrained ProductQA policy that runs on it
(``agile.executor.constrained``), on the tiny random-initialised model and the bundled ProductQA slice.
"""

from __future__ import annotations

import pytest
import torch
from lockstep_play import play_turns
from productqa_slice import SLICE

from agile.agents.prompt_cache import PromptKVCache, greedy_continue, kv_bytes_per_token
from agile import functions as fn
from agile.executor.episode import AgileSource
from agile.executor.policy import LLMPolicy, run_executors


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=1)  # seed 1 searches: query prompts run too


def _full_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


def _ids(seed, n):
    return torch.randint(100, 40_000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_prefill_reuses_the_longest_prefix_and_matches_a_full_pass(tiny):
    model, _ = tiny
    cache = PromptKVCache(model, max_tokens=10_000)
    head, a, b = _ids(0, 40), _ids(1, 25), _ids(2, 30)
    logits, kv = cache.prefill(head + a)
    assert cache.hits == 0 and cache.reused_tokens == 0
    assert kv[0][0].shape[-2] == 65
    torch.testing.assert_close(logits, _full_logits(model, head + a), atol=1e-5, rtol=1e-4)
    # Shares 40 tokens with the cached prompt: only the other 30 run.
    logits, _ = cache.prefill(head + b)
    assert (cache.hits, cache.reused_tokens) == (1, 40)
    torch.testing.assert_close(logits, _full_logits(model, head + b), atol=1e-5, rtol=1e-4)
    # The longest match wins: head + b + a shares 70 tokens with head + b, 40 with head + a.
    logits, _ = cache.prefill(head + b + a)
    assert (cache.hits, cache.reused_tokens) == (2, 110)
    torch.testing.assert_close(logits, _full_logits(model, head + b + a), atol=1e-5, rtol=1e-4)
    # head + b + a extends head + b, which it replaced; an exact repeat still runs its last token.
    assert len(cache) == 2
    again, _ = cache.prefill(head + a)
    assert cache.reused_tokens == 110 + 64
    torch.testing.assert_close(again, _full_logits(model, head + a), atol=1e-5, rtol=1e-4)
    assert cache.prompts == 4 and cache.prompt_tokens == 65 + 70 + 95 + 65
    held = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
    assert held == kv_bytes_per_token(model) * kv[0][0].shape[-2]


def test_cache_is_bounded_and_evicts_the_least_recently_used(tiny):
    model, _ = tiny
    cache = PromptKVCache(model, max_tokens=100)
    prompts = [_ids(10 + k, 30) for k in range(5)]
    for k, ids in enumerate(prompts[:3]):
        cache.prefill(ids)
        assert cache.tokens == 30 * (k + 1)
    cache.prefill(prompts[0] + [7])  # touches (and replaces) the oldest entry
    assert cache.tokens == 91 and len(cache) == 3
    cache.prefill(prompts[3])  # 121 tokens > 100: the least recently used (prompts[1]) goes
    assert cache.tokens == 91 and len(cache) == 3
    hits = cache.hits
    cache.prefill(prompts[1])
    assert cache.hits == hits  # evicted: nothing reused
    cache.prefill(prompts[3][:20] + [5, 6])
    assert cache.hits == hits + 1
    for k in range(40):
        cache.prefill(_ids(100 + k, 30))
        assert cache.tokens <= 100 and len(cache) <= 3
    cache.prefill(_ids(999, 150))  # larger than the whole budget: run, not kept
    assert cache.tokens <= 100


def test_greedy_continue_equals_generate(tiny):
    model, tokenizer = tiny
    prompts = [_ids(20, 37), _ids(21, 12), _ids(22, 25)]
    cache = PromptKVCache(model)
    rows = [cache.prefill(ids) for ids in prompts]
    ours = greedy_continue(model, rows, [set(), set(), set()], eos_ids=set(), max_new_tokens=9)
    for ids, out in zip(prompts, ours):
        expected = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  max_new_tokens=9, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=None)
        assert out == expected[0, len(ids):].tolist()
    # A stop token ends its row after it (kept); other rows go on; an end token is dropped.
    stops, eos = [{ours[0][3]}, set(), set()], {ours[2][1]}
    cut = greedy_continue(model, rows, stops, eos_ids=eos, max_new_tokens=9)

    def truncated(tokens, stop):
        kept = []
        for token in tokens:
            if token in eos:
                break
            kept.append(token)
            if token in stop:
                break
        return kept

    assert cut == [truncated(o, stop) for o, stop in zip(ours, stops)]
    assert len(cut[0]) <= 4 and len(cut[2]) <= 1
    assert greedy_continue(model, rows, [set()] * 3, set(), max_new_tokens=1) == [[o[0]] for o in ours]


# -- the constrained policy on the cache ----------------------------------------------------------


@pytest.fixture(scope="module")
def source():
    return AgileSource(SLICE, "train", model=None, memory="lexical")


def _policy(tiny, cache_tokens=None):
    policy = LLMPolicy(*tiny, max_new_tokens=6, greedy=True, decoding="constrained")
    if cache_tokens is not None:  # a cache that keeps nothing: every prompt runs from its first token
        policy.constrained.cache = PromptKVCache(tiny[0], max_tokens=cache_tokens)
        policy.constrained.fit_cache = False
    return policy


def test_constrained_turns_and_signals_are_the_same_without_reuse(tiny, source):
    warm, cold = _policy(tiny), _policy(tiny, cache_tokens=1)
    on = play_turns(warm, [e.executor for e in source.episodes(range(6), 0, 3)])
    off = play_turns(cold, [e.executor for e in source.episodes(range(6), 0, 3)])
    assert [t for t, _ in on] == [t for t, _ in off]
    for (_, a), (_, b) in zip(on, off):
        assert a.keys() == b.keys() and a == pytest.approx(b, abs=1e-4)
    assert any(tiny[1].decode(t).startswith(fn.SEARCH_PRODUCT) for t, _ in on)
    hot, none = warm.constrained.cache, cold.constrained.cache
    assert none.reused_tokens == 0 and none.prefilled_tokens == none.prompt_tokens == hot.prompt_tokens
    # Every prompt after the first shares at least the system text (in a batched round the first too: the
    # start its round shares is prefilled once, on its own); most of the work is reused.
    assert hot.hits >= hot.prompts - 1 and hot.prefilled_tokens < none.prefilled_tokens / 4
    assert hot.tokens <= hot.max_tokens


def test_reuse_is_the_shared_token_prefix(tiny, source):
    policy = _policy(tiny)
    cache = policy.constrained.cache
    lengths = []
    prefill = cache.prefill
    cache.prefill = lambda ids: lengths.append(len(ids)) or prefill(ids)
    first, second = (e.executor for e in source.episodes([0, 3], 0, 1))  # one group, other questions
    assert first.group is second.group
    prompts = first.prompt_ids(), second.prompt_ids()
    # A query's prompts extend one another (column, value, ending): each of its tokens runs once.
    run_executors([first], policy)
    assert next(s.text for s in first.segments if s.action).startswith(fn.SEARCH_PRODUCT)
    assert len(lengths) > 2 and lengths == sorted(lengths)
    assert cache.prefilled_tokens == max(lengths)
    # Another session of the group reuses exactly the tokens its prompt shares with the first one's:
    # the system text and the table's schema at least.
    shared = 0
    while shared < min(map(len, prompts)) and prompts[0][shared] == prompts[1][shared]:
        shared += 1
    assert len(second.segments[0].ids) <= shared < len(prompts[1])
    before = cache.reused_tokens
    cache.prefill(prompts[1])
    assert cache.reused_tokens - before == shared
