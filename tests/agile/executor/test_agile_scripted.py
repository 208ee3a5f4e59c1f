"""The AGILE executor with scripted and strong actors, and its lexical memory.

The executor is on its way to being ProductQA's only loop: the simulator (known dynamics), the human
at the terminal and a stronger model act on its episodes, and its memory may retrieve by shared words.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pytest

from agile.agents.human_agent import HumanCLIAgent
from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.answer_eval import is_correct, parse_product_ids
from agile.envs.scripted_answers import NO_PRODUCT, ScriptedAnswers, question_type
from agile.executor.episode import AgileEpisode, AgileSource
from agile.executor.lexical import LexicalEmbedder
from agile.executor.memory import Memory
from helper.gates.registry import GATES
from agile.protocol import BASE, HUMAN, STRONG
from agile.rollout import run_episodes
from helper.data.environment import EnvSetup, EnvSpec

from productqa_slice import SLICE


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def scripted_source(**kwargs) -> AgileSource:
    return AgileSource(SLICE, "train", model=None, memory="lexical", **kwargs)


def test_lexical_vectors_are_bags_of_content_words():
    embedder = LexicalEmbedder()
    a, b, c, empty = embedder.encode(["Is the blade sharp?", "A SHARP blade, is it?", "Battery life of this lens",
                                      "is it the one?"])
    assert np.isclose(a @ b, 1.0)  # same content words, stopwords and case aside
    assert np.isclose(a @ c, 0.0)
    assert not empty.any()  # only stopwords: no direction, scores 0 with everything
    assert np.allclose(np.linalg.norm([a, b, c], axis=1), 1.0)


def test_lexical_memory_retrieves_by_shared_words():
    memory = Memory(LexicalEmbedder())
    memory.add_qa("How long does the battery last?", "ten hours", "B1")
    memory.add_qa("Is the lens cap included?", "yes", "B1")
    memory.add_qa("How long is the battery warranty?", "a year", "B2")
    found = memory.retrieve("What is the battery life?", "B1", k_history=1, k_knowledge=1)
    assert [e.text for e, _ in found.history] == ["Q: How long does the battery last? A: ten hours"]
    # {battery} against {long, battery, last} and {long, battery, warranty}: 1/sqrt(3) each.
    assert memory.count_similar("battery", 0.57) == 2 and memory.count_similar("battery", 0.58) == 0
    assert np.allclose(memory.similarities("battery last long"), [1.0, 0.0, 2 / 3])


def test_a_scripted_source_loads_no_model_and_asks_for_no_reflection():
    source = scripted_source()
    assert source.policy is None and not source.config.use_reflection
    with pytest.raises(ValueError, match="scripted"):
        source.agent()


@pytest.mark.parametrize("accuracy, expected", [(1.0, 1.0), (0.0, 0.0)])
def test_the_simulator_plays_the_executor_right_or_wrong(accuracy, expected):
    source = scripted_source()
    episodes = source.episodes(range(4), seed=0, questions_per_episode=3)
    agent = SimulatorAgent({}, default_accuracy=accuracy, seed=1)
    records = run_episodes(episodes, agent, budget=0)
    assert [e.success() for e in episodes] == [expected] * 4
    assert all(r.actor == BASE and not r.intervened for rs in records for r in rs)
    # One turn a question, each a submitted answer (no error line, no retry).
    assert all(r.turns == 1 for e in episodes for r in e.executor.records)


def test_wrong_scripted_answers_are_wrong_and_shaped_like_gold():
    source = scripted_source()
    group = source.group("blades")
    answers = ScriptedAnswers(group)
    gold_counts = set(answers.search_answer_counts())
    rng = random.Random(0)
    for question in group.questions:
        for _ in range(5):
            text = answers.wrong(question, rng)
            assert not is_correct(question, text, answers.titles), (question.id, text)
            if question.type == "search_qa":
                n = 0 if text == NO_PRODUCT else len(parse_product_ids(text, answers.titles))
                assert n in gold_counts


def test_advice_is_remembered_and_counted_as_such():
    source = scripted_source()
    (episode,) = source.episodes([0], seed=0, questions_per_episode=4)
    first = episode.observe()
    assert first.features["memory_advice_hits"] == 0.0
    assert question_type(first) is not None  # the simulator's annotation is there, never a feature
    assert not any(key.startswith("type_") for key in first.features)
    episode.step(episode.expert_action())  # the human's answer, filed in memory as advice
    assert episode.executor.records[-1].advised
    assert [e.from_advice for e in episode.executor.memory.entries] == [True]
    # A later question whose words meet the advised one retrieves it, counted as advice.
    episode.executor.memory.add_qa("unrelated words entirely", "x", "nope", from_advice=False)
    hits = episode.executor.memory.retrieve(episode.executor.questions[0].question,
                                            episode.executor.questions[0].asin, 2, 2)
    assert sum(e.from_advice for e, _ in hits.history + hits.knowledge) == 1


def test_a_stronger_model_acts_on_interventions():
    spec = EnvSpec(env="agile", agent="simulator", strong="tiny", data=str(SLICE), questions_per_episode=2,
                   memory="lexical", decoding="constrained", max_new_tokens=4)
    setup = EnvSetup(spec, "train", groups=["blades"])
    strong = setup.strong_actor()
    assert strong.actor == STRONG and strong.name == "strong:tiny"
    episodes = setup.episodes(range(2), seed=0)
    assert all(isinstance(e, AgileEpisode) for e in episodes)
    records = run_episodes(episodes, setup.base_agent(), strong=strong, gate=GATES["always"](None), budget=2)
    assert all(r.actor == STRONG and r.intervened for rs in records for r in rs)
    # The strong model's turns are its own answers, not the human's advice.
    assert not any(r.advised for e in episodes for r in e.executor.records)


def test_a_person_at_the_terminal_answers_on_the_executor():
    spec = EnvSpec(env="agile", agent="simulator", strong="human-cli", data=str(SLICE), questions_per_episode=2,
                   memory="lexical")
    setup = EnvSetup(spec, "train", groups=["blades"])
    (episode,) = setup.episodes([0], seed=0)
    gold = [episode.gold_action().text]
    human = HumanCLIAgent(input_stream=io.StringIO(f"{gold[0]}\n[PredictAnswer] no idea\n"), prompt_stream=io.StringIO())
    records = run_episodes([episode], setup.base_agent(), strong=human, gate=GATES["always"](None), budget=2)
    assert [r.actor for r in records[0]] == [HUMAN, HUMAN]
    assert episode.executor.records[0].correct


@pytest.mark.parametrize("spec, words", [
    (dict(strong="simulator"), "strong='simulator'"),
    (dict(env="textworld", strong="simulator"), "strong='simulator'"),
    (dict(memory="vectors"), "memory='vectors'"),
])
def test_what_the_executor_cannot_run_is_refused_in_one_line(spec, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")) as error:
        EnvSpec(**{"env": "agile", **spec}).check()
    assert "\n" not in str(error.value)
