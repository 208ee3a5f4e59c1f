"""The prompt key/value cache: same logits and actions as without it, real reuse, bounded size."""

from __future__ import annotations

import pytest
import torch

from agile.agents.llm_agent import LLMAgent
from agile.agents.prompt_cache import PromptKVCache, greedy_continue, kv_bytes_per_token
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa_env import ProductQASource
from agile.rollout import run_episodes


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=0)


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


def test_agent_gives_the_same_actions_with_and_without_the_prompt_cache(tiny):
    source = ProductQASource(default_catalog_dir(seed=0), "test")
    kwargs = {"budget": 1, "explore_p": 0.3, "rng_seed": 3}
    # The answer cache is off so that every call reaches the model.
    # search_bias: every question not phrased as yes/no is searched, so the search prompts run too.
    off = LLMAgent("tiny", lm=tiny, max_new_tokens=10, cache_size=0, prefix_cache_tokens=0, search_bias=1e3)
    on = LLMAgent("tiny", lm=tiny, max_new_tokens=10, cache_size=0, max_batch=4, search_bias=1e3)
    assert off.prefix_cache is None and on.prefix_cache is not None
    records_off = run_episodes(source.episodes(range(8), 1, 3), off, **kwargs)
    records_on = run_episodes(source.episodes(range(8), 1, 3), on, **kwargs)
    actions_off = [r.action_text for rows in records_off for r in rows]
    actions_on = [r.action_text for rows in records_on for r in rows]
    assert actions_on == actions_off
    assert any(text.startswith("[SearchProduct]") for text in actions_on)
    cache = on.prefix_cache
    assert cache.hits == cache.prompts - 1  # every prompt after the first shares the chat header
    assert cache.reused_tokens > 0 and cache.tokens <= cache.max_tokens


def test_answer_after_a_search_reuses_the_prompt_that_wrote_the_query(tiny):
    from agile.agents.llm_agent import choose_mode
    from agile.protocol import Action

    source = ProductQASource(default_catalog_dir(seed=0), "test")
    episode = next(e for e in source.episodes(range(40), 2, 1) if e.question.type == "search_qa")
    agent = LLMAgent("tiny", lm=tiny, max_new_tokens=6, cache_size=0)
    query = episode.observe()
    assert choose_mode(query) == "sql"
    agent.act([query])
    episode.step(Action(f"[SearchProduct] {episode.question.gold_sql}"))
    answer = episode.observe()
    assert choose_mode(answer) == "ids"
    before = agent.prefix_cache.reused_tokens
    agent.act([answer])
    reused = agent.prefix_cache.reused_tokens - before
    # Everything up to the end of the query prompt's state text is shared (the schema included).
    shared = len(agent.tokenizer(agent.prompt(query, "sql").split(query.state_text)[0] + query.state_text,
                                 add_special_tokens=False)["input_ids"])
    assert abs(reused - shared) <= 2  # the tokens at the seam may merge either way
