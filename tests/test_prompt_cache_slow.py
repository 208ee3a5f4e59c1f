"""SmolLM2-135M acts the same with and without the prompt key/value cache (greedy, CPU)."""

from __future__ import annotations

import pytest

from agile.agents.llm_agent import LLMAgent
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa_env import ProductQASource
from agile.rollout import run_episodes

pytestmark = pytest.mark.slow


def test_smollm2_actions_are_identical_with_the_prompt_cache(one_torch_thread):
    source = ProductQASource(default_catalog_dir(seed=0), "test")
    on = LLMAgent("smollm2", device="cpu", cache_size=0)
    off = LLMAgent("smollm2", lm=(on.model, on.tokenizer), cache_size=0, prefix_cache_tokens=0)
    assert on.prefix_cache is not None and off.prefix_cache is None
    # Episodes 0..3 of seed 0 hold yes/no, free-text and search questions (query, then answer).
    records = {}
    for name, agent in (("off", off), ("on", on)):
        records[name] = run_episodes(source.episodes(range(4), 0, 3), agent)
    actions = {name: [r.action_text for rows in recs for r in rows] for name, recs in records.items()}
    assert actions["on"] == actions["off"]
    assert any(text.startswith("[SearchProduct]") and "\n[PredictAnswer]" in text for text in actions["on"])
    assert on.prefix_cache.reused_tokens > 0.1 * on.prefix_cache.prompt_tokens
