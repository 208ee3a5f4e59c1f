"""ProductQA episodes as the loop plays them: sessions of questions run by the AGILE executor.

A scripted source (no LLM) on both data sources: the generated catalog and the bundled slice of the
public data.
"""

from __future__ import annotations

import random

import pytest

from agile.envs.answer_eval import is_correct
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.scripted_answers import question_type
from agile import functions as fn
from agile.executor.episode import AgileSource, make_episodes
from agile.executor.executor import ExecutorConfig
from agile.protocol import BASE, HUMAN, Action

from productqa_slice import SLICE


@pytest.fixture(scope="module", params=["catalog", "real"])
def root(request):
    return default_catalog_dir(seed=0) if request.param == "catalog" else SLICE


@pytest.fixture(scope="module")
def train(root):
    """The train split, loaded once per data source (groups and product tables are shared)."""
    return AgileSource(root, "train", model=None, memory="lexical")


def _play(episode, choose):
    """Play to the end with ``choose(episode) -> Action``; return the rewards of the answered questions."""
    rewards = []
    while not episode.done:
        result = episode.step(choose(episode))
        if "question_id" in result.info:
            rewards.append(result.reward)
    return rewards


def test_same_seed_same_episode_other_seed_differs(root, train):
    first = make_episodes(root, "train", n=6, seed=11, questions_per_episode=5)
    again = train.episodes(range(6), seed=11, questions_per_episode=5)
    other = train.episodes(range(6), seed=12, questions_per_episode=5)
    assert [e.episode_id for e in first] == [e.episode_id for e in again]
    for a, b in zip(first, again):
        assert [q.id for q in a.executor.questions] == [q.id for q in b.executor.questions]
        while not a.done:
            oa, ob = a.observe(), b.observe()
            assert oa == ob
            a.step(a.expert_action() if oa.step % 2 else Action("[PredictAnswer] yes"))
            b.step(b.expert_action() if ob.step % 2 else Action("[PredictAnswer] yes"))
        assert a.success() == b.success()
    assert any([q.id for q in a.executor.questions] != [q.id for q in c.executor.questions]
               for a, c in zip(first, other))


def test_episodes_spread_round_robin_over_groups(train):
    episodes = train.episodes(range(2 * len(train.group_names)), seed=0, questions_per_episode=3)
    assert [e.group for e in episodes] == train.group_names * 2
    assert len({e.episode_id for e in episodes}) == len(episodes)
    # Episode i alone equals episode i built among others (collection builds shards alone).
    (alone,) = train.episodes([3], seed=0, questions_per_episode=3)
    assert alone.episode_id == episodes[3].episode_id
    assert alone.executor.questions == episodes[3].executor.questions


def test_success_is_the_share_right_and_advice_and_gold_are_right(root, train):
    rng = random.Random(0)
    for episode in train.episodes(range(5), seed=3, questions_per_episode=8):
        rewards = _play(episode, lambda e: e.gold_action() if rng.random() < 0.5 else e.distractor_action(rng))
        assert len(rewards) == 8 and episode.success() == pytest.approx(sum(rewards) / 8)
    for episode in make_episodes(root, "test", n=4, seed=5, questions_per_episode=8):
        while not episode.done:
            gold = episode.gold_action()
            assert gold.actor == BASE and is_correct(episode.executor.question, gold.text.split(" ", 1)[1],
                                                     episode.executor.titles)
            advice = episode.expert_action()
            assert advice.actor == HUMAN and advice.text == fn.SEEK_ADVICE
            assert episode.step(advice).reward == 1.0
        assert episode.success() == 1.0 and all(r.advised for r in episode.executor.records)


def test_distractors_are_wrong(train):
    rng = random.Random(1)
    for episode in train.episodes(range(6), seed=8, questions_per_episode=8):
        assert _play(episode, lambda e: e.distractor_action(rng)) == [0.0] * 8


def test_clone_is_independent(train):
    (episode,) = train.episodes([0], seed=4, questions_per_episode=6)
    episode.step(episode.expert_action())
    before = episode.observe()
    copy = episode.clone()
    assert copy.observe() == before
    _play(copy, lambda e: Action("[PredictAnswer] no"))
    assert copy.done and not episode.done
    assert episode.observe() == before
    assert len(episode.executor.records) == 1 and len(copy.executor.records) == 6
    episode.step(episode.expert_action())
    assert len(episode.executor.memory) == 2 and len(copy.executor.memory) == 1  # advice alone is filed


def test_features_and_state_text(train):
    (episode,) = train.episodes([1], seed=2, questions_per_episode=8)
    while not episode.done:
        obs = episode.observe()
        question = episode.executor.question
        # The dataset's question type is an annotation, never a feature or part of the text.
        assert not any(k.startswith("type_") for k in obs.features)
        assert question_type(obs) == question.type and question.type not in obs.state_text
        assert obs.env == "productqa" and obs.task_id == f"{episode.group}/{question.id}"
        assert " ".join(question.question.split()) in obs.state_text and question.asin in obs.state_text
        # The table's schema opens every state, whatever the question (the system text).
        assert f"Table `{episode.group}`" in obs.state_text.split(fn.GET_QUESTION, 1)[0]
        assert {"memory_top_similarity", "memory_similar_count", "memory_entries", "retrieved_tokens",
                "memory_advice_hits"} == set(obs.features)
        episode.step(episode.expert_action())


def test_gold_features_add_the_type_indicators(root):
    gold = AgileSource(root, "train", model=None, memory="lexical", config=ExecutorConfig(gold_features=True))
    plain = AgileSource(root, "train", model=None, memory="lexical")
    ((episode,), (reference,)) = gold.episodes([1], 2, 8), plain.episodes([1], 2, 8)
    while not episode.done:
        obs, ref = episode.observe(), reference.observe()
        assert obs.features[f"type_{episode.executor.question.type}"] == 1.0
        assert sum(v for k, v in obs.features.items() if k.startswith("type_")) == 1.0
        assert {k: v for k, v in obs.features.items() if not k.startswith("type_")} == ref.features
        assert obs.state_text == ref.state_text
        episode.step(episode.expert_action())
        reference.step(reference.expert_action())


def test_a_gold_query_answers_a_search_question(train):
    group = train.group(train.group_names[0])
    question = next(q for q in group.questions if q.type == "search_qa" and q.short_answer and q.gold_sql)
    (episode,) = train.episodes([0], 0, 1)
    # The session's one question is the search question: a fresh executor on it, in the episode's place.
    episode.executor = type(episode.executor)(group, [question], episode.executor.tokenizer, episode.executor.memory,
                                              train.config, gate=episode.executor.gate, db=train.database(group))
    result = episode.step(Action(f"{fn.SEARCH_PRODUCT} {question.gold_sql}"))
    assert result.done and result.reward == 1.0
    assert set(episode.executor.records[0].answer) >= set(question.short_answer[:1])


def test_the_base_agent_cannot_seek_advice_and_garbage_is_retried_then_wrong(train):
    (episode,) = train.episodes([2], seed=9, questions_per_episode=3)
    seek = episode.step(Action(fn.SEEK_ADVICE))  # the loop decides advice: the agent is not offered it
    assert seek.info["tool"] == fn.ERROR and not episode.executor.records
    for _ in range(train.config.max_turns - 2):
        assert episode.step(Action("I think yes")).info["tool"] == fn.ERROR
    last = episode.step(Action("I think yes"))
    assert last.reward == 0.0 and not episode.executor.records[0].correct and not episode.executor.records[0].advised


def test_finished_episode_refuses_to_observe():
    (episode,) = make_episodes(default_catalog_dir(seed=0), "train", n=1, seed=0, questions_per_episode=1)
    episode.step(episode.expert_action())
    with pytest.raises(RuntimeError, match="over"):
        episode.observe()


def test_unknown_group_is_named():
    with pytest.raises(ValueError, match="no_such_group"):
        AgileSource(default_catalog_dir(seed=0), "train", ["no_such_group"], model=None)
