"""No dataset annotation reaches the ProductQA base agent or the PRM, and the simulator's wrong
answers do not show in their format (generated catalog: runs on a bare clone)."""

from __future__ import annotations

import collections
import random

import pytest

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.answer_eval import is_correct, parse_product_ids
from agile.envs.catalog_generator import default_catalog_dir
from agile.envs.productqa import Question
from agile.envs.scripted_answers import NO_PRODUCT, ScriptedAnswers
from agile.executor.episode import AgileEpisode, AgileSource
from agile.executor.executor import Executor
from agile.protocol import Action
from agile.rollout import run_episodes


@pytest.fixture(scope="module")
def source():
    return AgileSource(default_catalog_dir(seed=0), "train", model=None, memory="lexical")


def scrub(question: Question, index: int) -> Question:
    """The question as a deployed agent meets it: text, product and group only. The id goes too
    (ProductQA ids are ``<type>_<n>``)."""
    return Question(id=f"q{index}", asin=question.asin, question=question.question, short_answer="",
                    long_answer="", type="unknown", extra_data=None, group=question.group)


def with_questions(source: AgileSource, episode: AgileEpisode, scrubbed: bool) -> AgileEpisode:
    """A fresh copy of ``episode``'s session, its questions scrubbed of every annotation or not."""
    old = episode.executor
    questions = [scrub(q, i) if scrubbed else q for i, q in enumerate(old.questions)]
    executor = Executor(old.group, questions, old.tokenizer, type(old.memory)(old.memory.embedder), source.config,
                        gate=old.gate, db=old.db, episode_id=old.episode_id)
    return AgileEpisode(executor, episode.policy, episode.episode_id, episode.answers)


def prm_inputs(records):
    """What the PRM and the helper's features read of each logged decision (``prm.data.episodes``)."""
    return [(r.episode_id, r.step, r.state_text, r.action_text, r.proposal_text, r.features, r.proposal_signals)
            for episode in records for r in episode]


def test_no_annotation_reaches_the_llm_agent_or_the_prm(one_torch_thread):
    llm = AgileSource(default_catalog_dir(seed=0), "train", model="tiny", max_new_tokens=6, memory="lexical",
                      decoding="constrained")
    episodes = llm.episodes(range(6), seed=4, questions_per_episode=3)
    assert {"search_qa", "fact_qa"} <= {q.type for e in episodes for q in e.executor.questions}
    blind = [with_questions(llm, e, scrubbed=True) for e in episodes]
    assert all(e.observe().annotations["question_type"] == "unknown" for e in blind)
    seen = run_episodes([with_questions(llm, e, scrubbed=False) for e in episodes], llm.agent(),
                        decide_after="proposal")
    blind_seen = run_episodes(blind, llm.agent(), decide_after="proposal")
    assert prm_inputs(seen) == prm_inputs(blind_seen)
    functions = collections.Counter(r.action_text.split(" ", 1)[0] for e in seen for r in e)
    assert functions["[PredictAnswer]"] > 0, functions
    # The test can fail: the gold-features ablation hands the type over, and the inputs then differ.
    gold = AgileSource(default_catalog_dir(seed=0), "train", model="tiny", max_new_tokens=6, memory="lexical",
                       decoding="constrained", config=type(llm.config)(gold_features=True))
    annotated = run_episodes(gold.episodes(range(6), seed=4, questions_per_episode=3), gold.agent(),
                             decide_after="proposal")
    assert prm_inputs(annotated) != prm_inputs(seen)


def test_states_do_not_depend_on_the_question_type(source):
    """The schema opens every state and any question may be searched: the state text of a search
    question and of any other question are built alike."""
    for episode in source.episodes(range(6), seed=1, questions_per_episode=4):
        blind = with_questions(source, episode, scrubbed=True)
        while not episode.done:
            assert episode.observe().state_text == blind.observe().state_text
            # The agent's own answers (the human's would differ: scrubbing removed them).
            episode.step(Action("[PredictAnswer] yes"))
            blind.step(Action("[PredictAnswer] yes"))


def test_wrong_search_answers_have_the_gold_answers_format(source):
    counts = collections.Counter()
    gold_counts = collections.Counter()
    for name in source.group_names:
        resources = ScriptedAnswers(source.group(name))
        questions = resources.group.by_type("search_qa")
        gold_counts.update(len(q.short_answer) for q in questions)
        rng = random.Random(7)
        for question in questions:
            for _ in range(200):
                text = resources.wrong(question, rng)
                assert not is_correct(question, text, resources.titles), (question.id, text)
                named = [] if text == NO_PRODUCT else parse_product_ids(text, resources.titles)
                assert text == NO_PRODUCT or len(named) == len(text.split(", "))
                counts[len(named)] += 1
    gold = {n: c / sum(gold_counts.values()) for n, c in gold_counts.items()}
    drawn = {n: c / sum(counts.values()) for n, c in counts.items()}
    # Most generated gold answers list several ids, and so do the wrong ones now (one id, always,
    # before); the only departure is "none" where it would be right (gold answers that are empty).
    assert sum(p for n, p in gold.items() if n > 1) > 0.5 and sum(p for n, p in drawn.items() if n > 1) > 0.5
    distance = 0.5 * sum(abs(gold.get(n, 0) - drawn.get(n, 0)) for n in gold.keys() | drawn.keys())
    assert distance < 0.05, (gold, drawn)


def test_the_simulator_errs_in_the_gold_format(source):
    episodes = source.episodes(range(30), seed=3, questions_per_episode=4)
    agent = SimulatorAgent({"search_qa": 0.0}, default_accuracy=1.0, seed=1)
    sizes = []
    for episode in episodes:
        while not episode.done:
            observation = episode.observe()
            (action,) = agent.act([observation], [episode])
            question = episode.executor.question
            if question.type == "search_qa":
                argument = action.text.split(" ", 1)[1]
                sizes.append(0 if argument == NO_PRODUCT else len(argument.split(", ")))
            assert episode.step(action).reward == (0.0 if question.type == "search_qa" else 1.0)
    assert len(sizes) >= 10 and sum(n > 1 for n in sizes) > len(sizes) / 3


def test_agile_task_ids_carry_the_product_group_so_prm_folds_are_by_group():
    import polars as pl

    from prm.data.folds import assign_folds, task_group

    source = AgileSource(default_catalog_dir(seed=0), "train", model=None, memory="lexical")
    episodes = source.episodes(range(12), seed=0, questions_per_episode=2)
    rows = []
    for episode in episodes:
        observation = episode.observe()
        group = episode.executor.group.name
        assert observation.task_id == f"{group}/{episode.executor.question.id}"
        assert task_group(observation.task_id) == group and group in source.group_names
        rows.append({"episode_id": episode.episode_id, "task_id": observation.task_id,
                     "prefix_key": episode.episode_id})
    assert {task_group(r["task_id"]) for r in rows} == set(source.group_names)  # six real groups, gen_backpacks ...
    folds = assign_folds(pl.DataFrame(rows), folds=3)
    assert folds.how.startswith("task group") and folds.k == 3
    by_group = {}
    for r in rows:
        by_group.setdefault(task_group(r["task_id"]), set()).add(folds.fold[r["episode_id"]])
    assert all(len(f) == 1 for f in by_group.values())  # a group never spans two folds
