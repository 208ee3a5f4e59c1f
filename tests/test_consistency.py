"""The agent's own consistency: k answers sampled from one prefill, deterministic per decision."""

from __future__ import annotations

import math

import pytest
import torch

from agile.agents.llm_agent import CONSISTENCY_KEYS, LLMAgent, consistency_signals
from agile.agents.prompt_cache import PromptKVCache, greedy_continue, sample_continue
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa_env import ProductQASource
from agile.rollout import run_episodes
from helper.data.collect import main as collect_main


@pytest.fixture(scope="module")
def tiny(one_torch_thread):
    from agile.models import load_causal_lm

    return load_causal_lm("tiny", device="cpu", seed=0)


def _ids(seed, n):
    return torch.randint(100, 40_000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_consistency_signals_exact_values():
    said = consistency_signals("[PredictAnswer] Yes", ["[PredictAnswer] yes", "[PredictAnswer]  YES\n# note",
                                                       "[PredictAnswer] no"])
    assert said["consistency_agree"] == pytest.approx(2 / 3)
    assert said["consistency_entropy"] == pytest.approx(-(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3))
    same = consistency_signals("a", ["a"] * 5)
    assert same == {"consistency_agree": 1.0, "consistency_entropy": 0.0}
    spread = consistency_signals("z", ["a", "b", "c", "d"])
    assert spread["consistency_agree"] == 0.0 and spread["consistency_entropy"] == pytest.approx(math.log(4))


def test_samples_share_one_prefill_and_follow_their_generator(tiny):
    model, _ = tiny
    cache = PromptKVCache(model)
    row = cache.prefill(_ids(5, 40))
    assert cache.prefilled_tokens == 40

    def draw(seed, k=6, temperature=1.0):
        return sample_continue(model, row, k, set(), set(), 8, temperature, torch.Generator().manual_seed(seed))

    first = draw(1)
    assert len(first) == 6 and all(len(tokens) == 8 for tokens in first)
    assert draw(1) == first  # the same generator seed, the same samples
    assert draw(2) != first
    assert len({tuple(t) for t in first}) > 1  # a random-initialised model at temperature 1 varies
    # Near zero temperature a sample is the greedy continuation.
    greedy = greedy_continue(model, [row], [set()], set(), 8)[0]
    assert draw(3, k=3, temperature=1e-4) == [greedy] * 3
    assert cache.prefilled_tokens == 40 and cache.prompts == 1  # no sample ran the prompt again
    with pytest.raises(ValueError, match="k must be >= 1"):
        sample_continue(model, row, 0, set(), set(), 8, 1.0, torch.Generator())


def _play(tiny, samples, seed=0, max_batch=32, episodes=range(6)):
    source = ProductQASource(default_catalog_dir(seed=0), "test")
    agent = LLMAgent("tiny", lm=tiny, max_new_tokens=6, cache_size=0, max_batch=max_batch, seed=seed,
                     consistency_samples=samples)
    records = run_episodes(source.episodes(episodes, 1, 3), agent, budget=1, explore_p=0.3, rng_seed=3,
                           decide_after="proposal")
    return agent, [r for rows in records for r in rows]


def test_agent_prefills_each_prompt_once_whatever_k(tiny):
    plain, rows_plain = _play(tiny, 0)
    sampled, rows_sampled = _play(tiny, 4)
    # The greedy proposals are the same; the samples only add signals.
    assert [r.proposal_text for r in rows_sampled] == [r.proposal_text for r in rows_plain]
    assert [r.action_text for r in rows_sampled] == [r.action_text for r in rows_plain]
    # Prefill counted in tokens: the k samples reuse the greedy answer's prompt, never prefill it again.
    assert sampled.prefix_cache.prompts == plain.prefix_cache.prompts
    assert sampled.prefix_cache.prefilled_tokens == plain.prefix_cache.prefilled_tokens > 0
    assert sampled.sample_seconds > 0 and plain.sample_seconds == 0
    assert sampled.decisions == plain.decisions > 0
    signals = [r.proposal_signals for r in rows_sampled]
    with_samples = [s for s in signals if "answer_logprob" in s]
    assert with_samples and all(set(CONSISTENCY_KEYS) <= set(s) for s in with_samples)
    for s in with_samples:
        assert s["consistency_agree"] in {0.0, 0.25, 0.5, 0.75, 1.0}
        assert 0.0 <= s["consistency_entropy"] <= math.log(4) + 1e-9
    assert len({s["consistency_agree"] for s in with_samples}) > 1
    assert not any(k in r.proposal_signals for r in rows_plain for k in CONSISTENCY_KEYS)


def test_samples_are_deterministic_per_decision_not_per_stream(tiny):
    def signals(rows):
        return {(r.episode_id, r.step): r.proposal_signals for r in rows}

    def same(a: dict, b: dict) -> bool:
        """The samples' signals exactly; the greedy answer's log-probabilities up to the float
        rounding that another batch shape gives (the module docstring's promise)."""
        return a.keys() == b.keys() and all(
            a[k] == b[k] if k.startswith("consistency_") else a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6)
            for k in a)

    _, one = _play(tiny, 3, max_batch=32)
    _, again = _play(tiny, 3, max_batch=1)  # other batches, same decisions
    assert signals(again).keys() == signals(one).keys()
    assert all(same(signals(again)[key], said) for key, said in signals(one).items())
    # A decision's samples do not depend on which other episodes ran beside it.
    _, alone = _play(tiny, 3, episodes=range(3, 6))
    for key, said in signals(alone).items():
        assert same(signals(one)[key], said)
    _, other_seed = _play(tiny, 3, seed=7)
    assert signals(other_seed) != signals(one)


@pytest.mark.parametrize("argv, named", [
    (["--agent", "llm", "--model", "tiny", "--consistency-samples", "-1"], "consistency_samples must be >= 0"),
    (["--agent", "simulator", "--consistency-samples", "3"], "consistency_samples=3"),
])
def test_bad_sample_counts_are_one_line_naming_the_option(tmp_path, capsys, argv, named):
    assert collect_main([*argv, "--episodes", "2", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and "\n" not in err and "Traceback" not in err
