"""Answers of scripted agents (known dynamics): the gold answer as text, and plausible wrong ones.

    answers = ScriptedAnswers(group)
    gold_answer_text(question)           # "B0001, B0002" / "none" / "yes"
    answers.wrong(question, rng)         # shaped like the gold answers, never correct
    question_type(observation)           # the dataset's type, read from the annotations

Both ProductQA loops use it, so a simulator's right and wrong answers look alike on either: a wrong
answer must not show in its format, or a verifier learns the format instead of the mistake.

- a yes/no gold is flipped;
- another free-text gold is replaced by the answer of another question of the same type that is
  not correct here (``not sure`` when none is);
- a search gold (product ids) is replaced by a list whose length is drawn from the group's gold
  search answers' lengths (0 is ``none``), with at least one id that is not gold.
"""

from __future__ import annotations

import html
import random

from agile.envs.answer_eval import is_correct
from agile.envs.productqa import ProductGroup, Question
from agile.protocol import Observation

NO_PRODUCT = "none"
"""What a search answer that names no product says (the gold when nothing matches)."""


def gold_answer_text(question: Question) -> str:
    """The gold short answer as the text of a ``[PredictAnswer]`` (for search: every gold id)."""
    if question.type == "search_qa":
        return ", ".join(question.short_answer) if question.short_answer else NO_PRODUCT
    return str(question.short_answer)


class ScriptedAnswers:
    """Gold and wrong answers for the questions of one group (module docstring)."""

    def __init__(self, group: ProductGroup):
        self.group = group
        self.titles = {asin: html.unescape(p["title"]) for asin, p in group.metadata.items()}
        self._search_counts: list[int] | None = None

    def search_answer_counts(self) -> list[int]:
        """Product ids in each gold answer of the group's search questions (0: none matches)."""
        if self._search_counts is None:
            self._search_counts = [len(q.short_answer) for q in self.group.by_type("search_qa")]
        return self._search_counts

    def wrong(self, question: Question, rng: random.Random) -> str:
        """A plausible wrong answer to ``question``, drawn with ``rng``."""
        if question.type == "search_qa":
            return self._wrong_search(question, rng)
        gold = str(question.short_answer)
        flip = {"yes": "no", "no": "yes"}.get(gold.strip().lower())
        if flip is not None:
            return flip
        pool = self.group.by_type(question.type)
        for _ in range(20):
            other = str(rng.choice(pool).short_answer)
            if not is_correct(question, other):
                return other
        return "not sure"

    def _wrong_search(self, question: Question, rng: random.Random) -> str:
        gold = set(question.short_answer)
        others = sorted(set(self.titles) - gold)
        counts = [n for n in self.search_answer_counts() if n > 0 or gold]  # "none" is right when gold is empty
        n = rng.choice(counts) if counts else 1
        if n == 0 or not others:
            return NO_PRODUCT  # wrong: gold is not empty here
        wrong = rng.choice(others)
        rest = sorted(set(self.titles) - {wrong})
        named = [wrong] + rng.sample(rest, min(n - 1, len(rest)))
        rng.shuffle(named)
        return ", ".join(named)


def question_type(observation: Observation) -> str | None:
    """The dataset's question type of a ProductQA decision point (None for other environments).

    Read from the observation's annotations; an observation built by hand may give it as a set
    ``type_<name>`` feature instead. For simulators and known-dynamics references only."""
    if "question_type" in observation.annotations:
        return observation.annotations["question_type"]
    for key, value in observation.features.items():
        if key.startswith("type_") and value:
            return key[len("type_"):]
    return None
