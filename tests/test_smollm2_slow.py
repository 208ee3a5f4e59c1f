"""The embedded SmolLM2-135M answers real ProductQA questions through the LLM agent.

Asserts what is robust (every action is well formed, a search runs end to end) and prints the
measured accuracy per question type (a 135M model is weak here; the numbers are for reading).
"""

from __future__ import annotations

import random

import pytest

from agile.envs.productqa_env import ProductQAEpisode, ProductQASource
from agile.executor.functions import parse_call
from agile.rollout import run_episodes
from productqa_slice import SLICE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def test_split():
    return ProductQASource(SLICE, "test")  # the real ProductQA slice bundled with the tests


def _questions(source, qtype, n, seed=0):
    """``n`` questions of one type, spread over the groups, one episode each."""
    rng = random.Random(seed)
    picked = []
    for k in range(n):
        resources = source.resources(source.group_names[k % len(source.group_names)])
        pool = [q for q in resources.group.by_type(qtype)
                if qtype != "fact_qa" or q.short_answer in ("yes", "no")]
        picked.append(ProductQAEpisode(resources, seed=k, questions=[rng.choice(pool)],
                                       episode_id=f"slow-{qtype}-{k}"))
    return picked


def test_smollm2_answers_real_productqa(test_split):
    from agile.agents.llm_agent import LLMAgent, is_yes_no_question

    agent = LLMAgent("smollm2", device="cpu")
    episodes = (_questions(test_split, "fact_qa", 10) + _questions(test_split, "reasoning_qa", 4)
                + _questions(test_split, "search_qa", 4))
    records = run_episodes(episodes, agent)
    accuracy: dict[str, list[float]] = {}
    for episode, (row,) in zip(episodes, records):
        qtype = episode.questions[0].type
        accuracy.setdefault(qtype, []).append(row.reward)
        # The agent decides by itself whether to search (never from the question type): a search is
        # its query, the result, then the answer; a yes/no-phrased question gets yes or no.
        lines = row.action_text.split("\n")
        final = parse_call(lines[-1])
        assert final is not None and final.name == "[PredictAnswer]", row.action_text
        if lines[0].startswith("[SearchProduct]"):
            assert lines[0].startswith("[SearchProduct] SELECT product_id FROM"), row.action_text
            assert lines[1].startswith("[SearchResult]"), row.action_text
        elif is_yes_no_question(episode.questions[0].question):
            assert len(lines) == 1 and final.argument in ("yes", "no"), row.action_text
        else:
            assert len(lines) == 1 and final.argument.strip(), row.action_text
        print(f"{qtype:13s} reward={row.reward:.0f} gold={episode.questions[0].short_answer!s:.40s} "
              f"action={row.action_text!r:.160s}")
    for qtype, rewards in accuracy.items():
        print(f"SmolLM2-135M accuracy on {qtype}: {sum(rewards) / len(rewards):.2f} ({len(rewards)} questions)")
