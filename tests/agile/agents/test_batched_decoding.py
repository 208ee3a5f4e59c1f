"""Batched constrained decoding: a lockstep round's turns written together give the turns written one at a
time, on the tiny random-initialised model and the bundled ProductQA slice; its batched forwards equal
single-row forwards; one malformed session is reported by name and does not take the round down."""

from __future__ import annotations

import itertools

import pytest
import torch
from lockstep_play import play_turns
from productqa_slice import SLICE

from agile.agents.batch_forward import chunks, score_many
from agile.agents.prompt_cache import PromptKVCache, greedy_continue, score_continuations
from agile import functions as fn
from agile.executor.constrained import TurnError
from agile.executor.episode import AgileSource
from agile.executor.policy import LLMPolicy


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=1)  # seed 1 searches and answers: every request kind runs


@pytest.fixture(scope="module")
def source():
    return AgileSource(SLICE, "train", model=None, memory="lexical")


def _ids(seed, n):
    return torch.randint(100, 40_000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _policy(tiny, batched: bool, samples: int = 0, cut_lines: bool = True, max_new_tokens: int = 6):
    policy = LLMPolicy(*tiny, max_new_tokens=max_new_tokens, greedy=True, decoding="constrained",
                       consistency_samples=samples)
    policy.constrained.batched = batched
    policy.constrained.cut_lines = cut_lines
    return policy


@pytest.mark.parametrize("samples", [0, 2])
def test_batched_rounds_write_the_turns_of_one_at_a_time(tiny, source, samples):
    """Eight sessions in lockstep over three groups: the same turns, the same choices and signals as the
    unbatched path that decodes every free answer line to its end."""
    alone, batched = _policy(tiny, False, samples, cut_lines=False), _policy(tiny, True, samples)
    one = play_turns(alone, [e.executor for e in source.episodes(range(8), 0, 3)])
    many = play_turns(batched, [e.executor for e in source.episodes(range(8), 0, 3)])
    assert [t for t, _ in one] == [t for t, _ in many]
    for (_, a), (_, b) in zip(one, many):
        assert a.keys() == b.keys() and a == pytest.approx(b, abs=1e-4)
    forms = {(c["function"], c["form"]) for c in batched.constrained.choices}
    assert ("[SearchProduct]", "sql") in forms and any(f == "[PredictAnswer]" for f, _ in forms)
    for a, b in zip(alone.constrained.choices, batched.constrained.choices):
        assert a["turn"] == b["turn"] and a["function_logprobs"] == pytest.approx(b["function_logprobs"], abs=1e-4)
    # The same prompts; the batched rounds ran their shared starts once, so about the same tokens ran through
    # the model as one at a time, where each prompt reuses the one before (a start that is itself a prompt
    # runs its last token again).
    hot, cold = batched.constrained.cache, alone.constrained.cache
    assert hot.prompt_tokens == cold.prompt_tokens
    assert cold.prefilled_tokens <= hot.prefilled_tokens + hot.start_tokens <= 1.01 * cold.prefilled_tokens


def test_free_lines_cut_when_hopeless_leave_every_choice_as_it_was(source, one_torch_thread):
    """Free answer lines up to 24 tokens: cut once below the second-best fixed line, same turns and signals."""
    from agile.models import load_causal_lm

    tiny = load_causal_lm("tiny", device="cpu", seed=3)  # seed 3 answers questions not worded yes/no
    full, cut = _policy(tiny, False, cut_lines=False, max_new_tokens=24), _policy(tiny, True, max_new_tokens=24)
    one = play_turns(full, [e.executor for e in source.episodes(range(8), 1, 3)])
    many = play_turns(cut, [e.executor for e in source.episodes(range(8), 1, 3)])
    assert [t for t, _ in one] == [t for t, _ in many]
    for (_, a), (_, b) in zip(one, many):
        assert a == pytest.approx(b, abs=1e-4)
    assert cut.constrained.lines_cut > 0 and full.constrained.lines_cut == 0
    for a, b in zip(full.constrained.choices, cut.constrained.choices):
        if "free" in a.get("form_logprobs", {}):  # a cut line's log-probability is an upper bound of the whole line's
            assert b["form_logprobs"]["free"] >= a["form_logprobs"]["free"] - 1e-4


def test_greedy_continue_floors_cut_exactly_where_the_sum_falls_below(tiny):
    model, _ = tiny
    cache = PromptKVCache(model, 100_000)
    rows = [cache.prefill(_ids(30 + i, 12)) for i in range(3)]
    ids, log_probs = greedy_continue(model, rows, [set()] * 3, set(), 8, with_log_probs=True)
    sums = [list(itertools.accumulate(lp)) for lp in log_probs]
    floors = [sums[0][2] - 1e-6, -float("inf"), sums[2][0] + 1e-6]  # cut after 4 tokens, never, after 1
    got, cut = greedy_continue(model, rows, [set()] * 3, set(), 8, floors=floors)
    assert cut == [True, False, True]
    assert got == [ids[0][:4], ids[1], ids[2][:1]]


def test_prefill_many_equals_prefill_one_at_a_time(tiny):
    model, _ = tiny
    head = _ids(0, 50)
    prompts = [head + _ids(1, 10), head + _ids(2, 30), _ids(3, 20), head + _ids(4, 3)]
    prompts += [prompts[0] + _ids(5, 5), list(prompts[2])]  # an extension and a repeat within the call
    single, many = PromptKVCache(model, 100_000), PromptKVCache(model, 100_000)
    alone = [single.prefill(p) for p in prompts]
    together = many.prefill_many(prompts)
    for (la, kva), (lb, kvb), p in zip(alone, together, prompts):
        torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-4)
        assert kvb[0][0].shape[-2] == len(p)
        for (ka, va), (kb, vb) in zip(kva, kvb):
            torch.testing.assert_close(ka, kb, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(va, vb, atol=1e-5, rtol=1e-4)
    # Every prompt asked for is counted (the repeat as wholly reused). The starts shared within the call ran
    # first, once: the 50-token head of four prompts, then the 60 tokens prompts[0] shares with its
    # extension; each token ran once, as one at a time.
    assert many.prompts == 6 and many.prompt_tokens == sum(map(len, prompts))
    assert many.start_tokens == 60 and many.prefilled_tokens + many.start_tokens == single.prefilled_tokens
    assert many.prompt_tokens - many.reused_tokens == many.prefilled_tokens


def test_packed_scoring_equals_one_row_at_a_time(tiny):
    model, _ = tiny
    cache = PromptKVCache(model, 100_000)
    prompts = [_ids(10, 40), _ids(11, 7), _ids(12, 1)]
    lines = [[_ids(20, 3), _ids(21, 1), _ids(22, 5)], [_ids(23, 2)], [_ids(24, 4), _ids(25, 4), _ids(26, 6)]]
    rows = [cache.prefill(p) for p in prompts]
    expected = [score_continuations(model, logits, kv, ls) for (logits, kv), ls in zip(rows, lines)]
    got = score_many(model, [(logits, kv, ls) for (logits, kv), ls in zip(rows, lines)])
    for e, g in zip(expected, got):
        assert g == pytest.approx(e, abs=1e-4)
    # A memory bound that allows one row per forward gives the same scores.
    apart = score_many(model, [(lo, kv, ls) for (lo, kv), ls in zip(rows, lines)], max_bytes=1)
    for a, g in zip(apart, got):
        assert a == pytest.approx(g, abs=1e-5)


def test_chunks_keep_similar_lengths_together_within_the_bound():
    sizes = [(100, 3), (10, 400), (50, 4), (0, 2), (80, 500), (5, 3)]
    groups = chunks(sizes, limit_tokens=10_000)
    assert sorted(i for g in groups for i in g) == list(range(6))
    for group in groups:
        news = [sizes[i][1] for i in group]
        assert max(news) <= 1.25 * min(news) + 8
        width = max(sizes[i][0] for i in group) + max(news)
        assert width * len(group) <= 10_000 or len(group) == 1
    assert [sorted(g) for g in chunks(sizes, limit_tokens=1)] == [[i] for i in (3, 0, 5, 2, 1, 4)]


def test_a_malformed_session_is_named_and_the_others_still_get_their_turns(tiny, source):
    policy = _policy(tiny, True)
    runs = [e.executor for e in source.episodes(range(4), 0, 2)]
    broken = runs[2]
    broken.allowed = lambda: []  # an executor with nothing to call: its turn cannot be written
    with pytest.raises(TurnError, match=broken.episode_id):
        policy(runs)
    # The round's other sessions were written before the error was raised.
    assert len(policy.constrained.choices) == 3
    assert all(c["function"] in (fn.SEARCH_PRODUCT, fn.PREDICT_ANSWER, fn.SEEK_ADVICE)
               for c in policy.constrained.choices)


def test_the_cache_grows_to_hold_a_round_so_no_turn_prefills_its_whole_prompt_again(tiny, source):
    """Eight sessions whose prompts overflow a small cache: grown to the round, every turn after the first
    of a session reuses that session's earlier prompt; kept small, turns run their prompts again."""
    def play(fit):
        policy = _policy(tiny, True)
        policy.constrained.cache = PromptKVCache(tiny[0], max_tokens=2_000)
        policy.constrained.fit_cache = fit
        turns = play_turns(policy, [e.executor for e in source.episodes(range(8), 0, 3)])
        return turns, policy.constrained.cache

    (grown_turns, grown), (small_turns, small) = play(True), play(False)
    assert [t for t, _ in grown_turns] == [t for t, _ in small_turns]
    assert grown.max_tokens > 2_000 and small.max_tokens == 2_000
    assert grown.prompt_tokens == small.prompt_tokens
    assert grown.prefilled_tokens + grown.start_tokens < 0.7 * (small.prefilled_tokens + small.start_tokens)
