"""The ProductQA episode: determinism, rewards, clone independence, expert answers, tools, memory.

Runs on the generated catalog and on the real ProductQA slice bundled with the tests
(``tests/data/productqa``).
"""

from __future__ import annotations

import random

import pytest

from agile.envs.answer_eval import is_correct
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa import load_group
from agile.envs.productqa_env import (
    SEARCH_RESULT_HEADER,
    ProductQAEpisode,
    ProductQASource,
    make_episodes,
    parse_action,
)
from agile.envs.scripted_answers import question_type
from agile.protocol import BASE, HUMAN, Action
from productqa_slice import SLICE


@pytest.fixture(scope="module", params=["catalog", "real"])
def root(request):
    return default_catalog_dir(seed=0) if request.param == "catalog" else SLICE


@pytest.fixture(scope="module")
def train(root):
    """The train split, loaded once per data source (groups and product tables are shared)."""
    return ProductQASource(root, "train")


def _play(episode, choose):
    """Play to the end with ``choose(episode) -> Action``; return the rewards."""
    rewards = []
    while not episode.done:
        rewards.append(episode.step(choose(episode)).reward)
    return rewards


def test_same_seed_same_episode_other_seed_differs(root, train):
    first = make_episodes(root, "train", n=6, seed=11, questions_per_episode=5)
    again = train.episodes(range(6), seed=11, questions_per_episode=5)
    other = train.episodes(range(6), seed=12, questions_per_episode=5)
    assert [e.episode_id for e in first] == [e.episode_id for e in again]
    for a, b in zip(first, again):
        assert [q.id for q in a.questions] == [q.id for q in b.questions]
        while not a.done:
            oa, ob = a.observe(), b.observe()
            assert oa == ob
            a.step(a.expert_action() if oa.step % 2 else Action("[PredictAnswer] yes"))
            b.step(b.expert_action() if ob.step % 2 else Action("[PredictAnswer] yes"))
        assert a.success() == b.success()
    assert any([q.id for q in a.questions] != [q.id for q in c.questions] for a, c in zip(first, other))


def test_episodes_spread_round_robin_over_groups(train):
    source = train
    episodes = source.episodes(range(2 * len(source.group_names)), seed=0, questions_per_episode=3)
    groups = [e.resources.group.name for e in episodes]
    assert groups == source.group_names * 2
    assert len({e.episode_id for e in episodes}) == len(episodes)
    # episode i alone equals episode i built among others (collection builds shards alone)
    alone = source.episode(3, seed=0, questions_per_episode=3)
    assert alone.episode_id == episodes[3].episode_id and alone.questions == episodes[3].questions


def test_success_is_mean_reward_and_expert_is_always_right(root, train):
    rng = random.Random(0)
    for episode in train.episodes(range(5), seed=3, questions_per_episode=8):
        rewards = _play(episode, lambda e: e.expert_action() if rng.random() < 0.5 else e.distractor_action(rng))
        assert episode.success() == pytest.approx(sum(rewards) / len(rewards))
    for episode in make_episodes(root, "test", n=4, seed=5, questions_per_episode=8):
        while not episode.done:
            action = episode.expert_action()
            assert action.actor == HUMAN
            assert is_correct(episode.question, parse_action(action.text)[1])
            assert episode.step(action).reward == 1.0
        assert episode.success() == 1.0


def test_distractor_is_wrong(train):
    rng = random.Random(1)
    for episode in train.episodes(range(6), seed=8, questions_per_episode=8):
        rewards = _play(episode, lambda e: e.distractor_action(rng))
        assert rewards == [0.0] * len(rewards)


def test_clone_is_independent(train):
    episode = train.episode(0, seed=4, questions_per_episode=6)
    episode.step(episode.expert_action())
    before = episode.observe()
    copy = episode.clone()
    assert copy.observe() == before
    _play(copy, lambda e: Action("[PredictAnswer] no"))
    assert copy.done and not episode.done
    assert episode.observe() == before
    assert len(episode.memory) == 1 and len(copy.memory) == 6
    episode.step(episode.expert_action())
    assert copy.position == 6 and episode.position == 2


def test_features_and_state_text(train):
    episode = train.episode(1, seed=2, questions_per_episode=8)
    while not episode.done:
        obs = episode.observe()
        question = episode.question
        # The dataset's question type is an annotation, never a feature or part of the text.
        assert not any(k.startswith("type_") for k in obs.features)
        assert question_type(obs) == question.type
        assert f"({question.type})" not in obs.state_text
        assert obs.features["progress"] == obs.step / obs.horizon
        assert question.question in obs.state_text and question.asin in obs.state_text
        # The schema opens every state, whatever the type (tests/test_honest_agent.py).
        assert obs.state_text.startswith("Table `")
        assert obs.features["memory_hits"] <= episode.memory_k
        episode.step(episode.expert_action())


def test_gold_features_add_the_type_indicators(train):
    episode = train.episode(1, seed=2, questions_per_episode=8, gold_features=True)
    plain = train.episode(1, seed=2, questions_per_episode=8)
    while not episode.done:
        obs, reference = episode.observe(), plain.observe()
        assert obs.features[f"type_{episode.question.type}"] == 1.0
        assert sum(v for k, v in obs.features.items() if k.startswith("type_")) == 1.0
        assert {k: v for k, v in obs.features.items() if not k.startswith("type_")} == reference.features
        assert obs.state_text == reference.state_text
        episode.step(episode.expert_action())
        plain.step(plain.expert_action())


def test_intervention_goes_to_memory_marked_as_advice():
    group = load_group(default_catalog_dir(seed=0) / "train" / "gen_backpacks")
    # two questions about the same product, back to back
    questions = [q for q in group.questions if q.type == "fact_qa"]
    asin = next(q.asin for q in questions if sum(p.asin == q.asin for p in questions) >= 2)
    same = [q for q in questions if q.asin == asin][:2]
    episode = ProductQAEpisode(group.path, seed=0, questions=same)  # from the folder
    assert episode.horizon == 2 and episode.observe().features["memory_hits"] == 0
    episode.step(episode.expert_action())
    obs = episode.observe()
    assert obs.features["memory_same_asin"] == 1.0 and obs.features["memory_advice_hits"] == 1.0
    assert "answer from human" in obs.state_text
    # the agent's own answer is stored too, marked as its own
    own = ProductQAEpisode(group, seed=0, questions=same)  # from a loaded group
    own.step(Action("[PredictAnswer] maybe", actor=BASE))
    obs = own.observe()
    assert obs.features["memory_advice_hits"] == 0.0 and "own answer): maybe" in obs.state_text


def test_search_tool_then_answer(train):
    source = train
    group = source.resources(source.group_names[0]).group
    question = next(q for q in group.questions if q.type == "search_qa" and q.short_answer)
    episode = ProductQAEpisode(source.resources(group.name), seed=0, questions=[question])
    result = episode.step(Action(f"[SearchProduct] {question.gold_sql}"))
    assert result.info["tool"] == "[SearchProduct]" and not result.done and result.reward == 0.0
    obs = episode.observe()
    assert obs.step == 0 and SEARCH_RESULT_HEADER in obs.state_text
    assert any(asin in result.info["tool_output"] for asin in question.short_answer)
    # a second search is over the limit: the question counts as unanswered
    over = episode.clone()
    assert over.step(Action(f"[SearchProduct] {question.gold_sql}")).reward == 0.0 and over.done
    final = episode.step(Action(f"[PredictAnswer] {question.short_answer[0]}"))
    assert final.reward == 1.0 and final.done
    # a broken query is shown to the agent, not raised
    broken = ProductQAEpisode(source.resources(group.name), seed=0, questions=[question])
    assert "SQL error" in broken.step(Action("[SearchProduct] SELECT nope FROM nowhere")).info["tool_output"]


def test_seek_advice_and_garbage_are_unanswered(train):
    episode = train.episode(2, seed=9, questions_per_episode=3)
    seek = episode.step(Action("[SeekAdvice]"))
    assert seek.reward == 0.0 and "advice" in seek.info["error"]
    garbage = episode.step(Action("I think yes"))
    assert garbage.reward == 0.0 and "function token" in garbage.info["error"]
    assert episode.position == 2 and len(episode.memory) == 0


def test_finished_episode_refuses_to_step():
    episode = make_episodes(default_catalog_dir(seed=0), "train", n=1, seed=0, questions_per_episode=1)[0]
    episode.step(episode.expert_action())
    with pytest.raises(RuntimeError, match="over"):
        episode.observe()


def test_unknown_group_is_named():
    with pytest.raises(ValueError, match="no_such_group"):
        ProductQASource(default_catalog_dir(seed=0), "train", ["no_such_group"])
