"""ProductQA as an episodic environment: one episode is a customer-service session.

A session is ``questions_per_episode`` consecutive questions of one product group (a contiguous
run in file order starting at an offset drawn from the episode's seed: the file order is the
session order of AGILE, where later questions reuse the products and knowledge of earlier ones).
Each question is one decision point. Before the agent attempts it, a gate may hand it to the
expert (the "human" gives the gold answer); either way the answer goes into the session memory,
marked with who gave it, and later questions see it through retrieval.

Function tokens (AGILE) the environment understands, one per action, first line only (later
lines are comments, e.g. a fallback note written by the agent):

- ``[PredictAnswer] <answer>``: answers the question; reward 1 if ``answer_eval.is_correct``.
- ``[SearchProduct] <SQL>``: a tool call, on any question. The SQL runs on the group's
  product table; the result (or SQLite's error) is shown in the next observation of the *same*
  decision point (reward 0, the question is not advanced). At most ``max_searches`` per question;
  a search beyond that counts as an unanswered question.
- ``[SeekAdvice]``: the agent asks for help. With no gate to answer it, it is an unanswered
  question (reward 0), recorded as such.
- anything else: an unanswered question (reward 0), ``info["error"]`` says why.

``success()`` is the mean per-question reward over the planned number of questions.

What a deployed agent sees and nothing more reaches ``features`` and ``state_text``: the dataset's
question type is an annotation (``Observation.annotations``, read by ``question_type``), not a
feature, and nothing in the state depends on it (the table's schema opens every state; any
question may be searched). ``gold_features=True`` adds the ``type_<name>`` indicators to the features, for the
ablation that measures what the gold label is worth.
"""

from __future__ import annotations

import dataclasses
import html
import random
from dataclasses import dataclass, field
from pathlib import Path

from agile.envs.answer_eval import is_correct, parse_product_ids
from agile.envs.product_db import ProductDB, SQLError
from agile.envs.productqa import QUESTION_TYPES, ProductGroup, Question, load_group
from agile.envs.scripted_answers import ScriptedAnswers, gold_answer_text
from agile.envs.session_memory import SessionMemory
from agile.envs.sessions import SplitSessions, session_window
from agile.executor.functions import PREDICT_ANSWER, SEARCH_PRODUCT, SEARCH_RESULT, SEEK_ADVICE, parse_call
from agile.protocol import BASE, HUMAN, Action, Observation, StepResult

ENV_NAME = "productqa"
PREDICT, SEARCH, SEEK = PREDICT_ANSWER, SEARCH_PRODUCT, SEEK_ADVICE
SEARCH_RESULT_HEADER = SEARCH_RESULT
"""Marks the tool output in ``state_text`` (agents use it to know the search has run)."""
_SHOWN_RESULTS = 5


def parse_action(text: str) -> tuple[str | None, str]:
    """``(function name or None, argument)`` of an action's first line (``agile.executor.functions``)."""
    call = parse_call(text)
    return (call.name, call.argument) if call else (None, (text or "").split("\n", 1)[0].strip())


class GroupResources:
    """What every episode of one group shares, read-only: questions, product table, schema text."""

    def __init__(self, group: ProductGroup):
        self.group = group
        self.db = ProductDB(group)
        self.schema_text = self.db.schema_text()
        self.answers = ScriptedAnswers(group)
        self.titles = self.answers.titles
        self.feature_names = tuple(name for name, _ in self.db.columns)

    def search_answer_counts(self) -> list[int]:
        """Product ids in each gold answer of the group's search questions (0: none matches)."""
        return self.answers.search_answer_counts()


@dataclass
class _Search:
    sql: str
    output: str


@dataclass(repr=False)
class ProductQAEpisode:
    """One session of questions; see the module docstring. Deterministic given (group, seed).

    ``resources`` may be given as a group folder, a loaded ``ProductGroup`` or, to share one
    product table between many episodes, a ``GroupResources``.
    """

    resources: GroupResources | ProductGroup | str | Path
    seed: int
    questions_per_episode: int = 8
    episode_id: str = ""
    memory_k: int = 3
    """Memory entries retrieved into the state text."""
    max_searches: int = 1
    """``[SearchProduct]`` calls allowed per question."""
    gold_features: bool = False
    """Add the dataset's question type as ``type_<name>`` features (an ablation: a deployed agent
    never has it)."""
    questions: list[Question] = field(default_factory=list)
    """The session's questions; drawn from the seed when not given."""
    # The running state (copied by ``clone``).
    position: int = 0
    rewards: list[float] = field(default_factory=list)
    memory: SessionMemory | None = None
    searches: list[_Search] = field(default_factory=list)

    env: str = ENV_NAME

    def __repr__(self) -> str:
        return (f"ProductQAEpisode({self.episode_id!r}, group={self.resources.group.name!r}, "
                f"seed={self.seed}, position={self.position}/{self.horizon})")

    def __post_init__(self):
        if self.questions_per_episode < 1:
            raise ValueError(f"questions_per_episode must be >= 1, got {self.questions_per_episode}.")
        if isinstance(self.resources, (str, Path)):
            self.resources = load_group(self.resources)
        if isinstance(self.resources, ProductGroup):
            self.resources = GroupResources(self.resources)
        group = self.resources.group
        if not self.questions:
            self.questions = session_window(group, self.seed, self.questions_per_episode)
        self.questions_per_episode = len(self.questions)
        if not self.episode_id:
            self.episode_id = f"{group.name}-{self.seed}"
        if self.memory is None:
            self.memory = SessionMemory(self.resources.feature_names)

    # -- the Episode protocol -------------------------------------------------------------

    @property
    def horizon(self) -> int:
        return self.questions_per_episode

    @property
    def done(self) -> bool:
        return self.position >= self.horizon

    @property
    def question(self) -> Question:
        """The question of the current decision point."""
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} is over: it has no current question.")
        return self.questions[self.position]

    def observe(self) -> Observation:
        question = self.question
        retrieved = self.memory.retrieve(question.question, question.asin, self.memory_k)
        features = {f"type_{t}": float(question.type == t) for t in QUESTION_TYPES} if self.gold_features else {}
        features.update(
            progress=self.position / self.horizon,
            memory_hits=float(len(retrieved)),
            memory_same_asin=float(sum(e.asin == question.asin for e in retrieved)),
            memory_advice_hits=float(sum(e.from_advice for e in retrieved)),
        )
        return Observation(
            episode_id=self.episode_id,
            env=ENV_NAME,
            task_id=f"{question.group}/{question.id}",
            step=self.position,
            state_text=self._render(question, retrieved),
            horizon=self.horizon,
            features=features,
            annotations={"question_type": question.type},
        )

    def step(self, action: Action) -> StepResult:
        question = self.question
        token, argument = parse_action(action.text)
        # Any question may be searched (the table is there for every question, as for a deployed
        # agent); a search answer to a question that wanted yes or no is simply wrong.
        if token == SEARCH and len(self.searches) < self.max_searches:
            output = self._run_search(argument)
            self.searches.append(_Search(argument, output))
            return StepResult(0.0, False, {"tool": SEARCH, "tool_output": f"{SEARCH_RESULT_HEADER} {output}"})
        info: dict = {"question_id": question.id, "type": question.type}
        if token == PREDICT:
            reward = float(is_correct(question, argument, self.resources.titles))
            self.memory.add(question.question, argument, action.actor, question.asin, self.position)
        else:
            reward = 0.0
            info["error"] = {
                SEEK: "sought advice with no one to give it: question left unanswered",
                SEARCH: "search not allowed here (not a search question, or search limit reached)",
            }.get(token, f"no usable function token in {action.text[:60]!r}: question left unanswered")
        self.rewards.append(reward)
        self.position += 1
        self.searches = []
        return StepResult(reward, self.done, info)

    def expert_action(self) -> Action:
        """The gold answer, given by the human (for search: every gold product id)."""
        return Action(f"{PREDICT} {gold_answer_text(self.question)}", actor=HUMAN)

    def success(self) -> float:
        return sum(self.rewards) / self.horizon

    def clone(self) -> ProductQAEpisode:
        # Questions and resources are read-only and shared; mutable state is copied.
        return dataclasses.replace(
            self, rewards=list(self.rewards), memory=self.memory.clone(), searches=list(self.searches)
        )

    # -- extras for scripted agents -------------------------------------------------------

    def distractor_action(self, rng: random.Random) -> Action:
        """A plausible wrong answer to the current question, shaped like the gold answers
        (``agile.envs.scripted_answers``: what a scripted agent says when it errs)."""
        return Action(f"{PREDICT} {self.resources.answers.wrong(self.question, rng)}", actor=BASE)

    # -- internals ------------------------------------------------------------------------

    def _run_search(self, sql: str) -> str:
        try:
            ids = self.resources.db.query(sql)
        except SQLError as error:
            return str(error)
        if not ids:
            return "no product matches."
        shown = [f"{asin} ({self.resources.titles.get(asin, '')[:60]})" for asin in ids[:_SHOWN_RESULTS]]
        more = f" (+{len(ids) - _SHOWN_RESULTS} more)" if len(ids) > _SHOWN_RESULTS else ""
        return "; ".join(shown) + more

    def _render(self, question: Question, retrieved) -> str:
        product = self.resources.group.metadata.get(question.asin, {})
        details = "; ".join(
            f"{key}: {html.unescape(str(value))}" for key, value in product.items()
            if key != "title" and value not in (None, "")
        )
        # The table's schema opens every state, whatever the question (showing it only for search
        # questions would tell the agent the dataset's question type); first, so that the prompts
        # of a group share it as a prefix.
        lines = [
            self.resources.schema_text,
            f"Question {self.position + 1} of {self.horizon}.",
            f"Customer: {question.question}",
            f"Product {question.asin}: {self.resources.titles.get(question.asin, '')}",
        ]
        if details:
            lines.append(f"Details: {details}")
        if retrieved:
            lines.append("Memory:")
            for entry in retrieved:
                who = "own answer" if entry.source == BASE else f"answer from {entry.source}"
                lines.append(f"- Q ({entry.asin}): {entry.question} A ({who}): {_short(entry.answer)}")
        for search in self.searches:
            lines.append(f"{SEARCH} {search.sql}")
            lines.append(f"{SEARCH_RESULT_HEADER} {search.output}")
        return "\n".join(lines)


def wrong_search_answer(question: Question, resources: GroupResources, rng: random.Random) -> str:
    """A wrong answer to a search question shaped like the group's gold answers
    (``agile.envs.scripted_answers.ScriptedAnswers.wrong``)."""
    return resources.answers.wrong(question, rng)


def _short(answer: str, limit: int = 120) -> str:
    # A search answer can list twenty product ids; the prompt only needs the first few.
    return answer if len(answer) <= limit else answer[:limit].rsplit(" ", 1)[0] + " ..."


def search_result_ids(state_text: str) -> list[str]:
    """Product ids listed by the last search result in a ``state_text`` (empty if none)."""
    lines = [line for line in state_text.split("\n") if line.startswith(SEARCH_RESULT_HEADER)]
    return parse_product_ids(lines[-1]) if lines else []


class ProductQASource(SplitSessions):
    """The groups of one ProductQA split and this stack's episodes of them.

    Episode ``i`` holds the session ``agile.envs.sessions.SplitSessions`` draws for ``(seed, i)``
    (the AGILE stack draws the same), so any subset of indices can be built alone.
    """

    def __init__(self, root: str | Path, split: str = "train", groups: list[str] | None = None):
        super().__init__(root, split, groups)
        self._resources: dict[str, GroupResources] = {}

    def resources(self, name: str) -> GroupResources:
        if name not in self._resources:
            self._resources[name] = GroupResources(self.group(name))
        return self._resources[name]

    def episode(self, index: int, seed: int, questions_per_episode: int = 8, **kwargs) -> ProductQAEpisode:
        group, questions = self.window(index, seed, questions_per_episode)
        return ProductQAEpisode(
            self.resources(group.name),
            self.episode_seed(index, seed),
            questions_per_episode,
            episode_id=self.episode_name(index, seed),
            questions=questions,
            **kwargs,
        )

    def episodes(self, indices, seed: int, questions_per_episode: int = 8, **kwargs) -> list[ProductQAEpisode]:
        return [self.episode(i, seed, questions_per_episode, **kwargs) for i in indices]


def make_episodes(
    root: str | Path,
    split: str = "train",
    n: int = 16,
    seed: int = 0,
    questions_per_episode: int = 8,
    groups: list[str] | None = None,
    start: int = 0,
) -> list[ProductQAEpisode]:
    """Episodes ``start .. start+n-1`` spread round-robin over the split's groups."""
    return ProductQASource(root, split, groups).episodes(range(start, start + n), seed, questions_per_episode)
