"""The executor: runs the function tokens of one ProductQA episode and keeps the context.

An episode is a sequence of questions on one product group; a session is one question. The
executor is a small state machine driven by the LLM's turns:

1. A session starts: ``[ClearContext]`` drops earlier sessions beyond ``keep_sessions``, then the
   executor runs ``[GetQuestion]`` (question + the product's row) and ``[RetrieveMemory]``
   (group knowledge and the product's QA history, cosine top-k). With a gate, the gate decides
   here whether to seek advice (within ``budget``, counted by ``agile.budget.EpisodeBudget``, the
   count the episode loop and the gates keep too) before the LLM is asked.
2. The LLM's turn (``act``) is one line: ``[SeekAdvice]``, ``[SearchProduct] <SQL>`` or
   ``[PredictAnswer] <answer>``. SQL runs on the group's SQLite table and its product ids are
   the answer; a failing query or an unknown function shows an ``[Error]``-style line and the
   LLM tries again, up to ``max_turns`` turns per session (then the question counts as wrong).
3. ``[SeekAdvice]`` appends the human's long answer (the gold one), whose short answer is
   submitted (correct by definition, at cost c); then the LLM writes ``[Reflection] ...`` and a
   reflection other than "no information" is stored as group knowledge.
4. ``[SubmitAnswer]`` scores the answer, ``[UpdateMemory]`` files the QA pair (the verified
   answer from advice; the agent's own answers only with ``store_own_answers``), and the next
   session starts.

The context is a list of token-id segments, so the ids the LLM was conditioned on are exactly
the ids PPO trains on (no re-tokenisation). Each finished session leaves a ``SessionRecord`` with
its token ids and an action mask (1 on the tokens the LLM produced in that session).
"""

from __future__ import annotations

import copy
import html
import json
from dataclasses import dataclass, field

import numpy as np

from agile.budget import EpisodeBudget
from agile.envs.answer_eval import is_correct
from agile.envs.product_db import ProductDB, SQLError
from agile.envs.productqa import QUESTION_TYPES, ProductGroup, Question
from agile import functions as fn
from agile.executor.memory import Memory
from agile.executor.scores import DEFAULT_ADVICE_COST, question_reward
from agile.executor.reflection import is_no_information
from agile.protocol import Observation

ENV_NAME = "productqa"
"""The env name of the executor's observations: the executor is ProductQA's episode loop."""
QUESTION_AGAIN = "Question:"
"""Starts the line that restates the question (``ExecutorConfig.restate_question``)."""
_MAX_ENTRY_WORDS = 60  # a retrieved entry is cut so that memory cannot crowd out the question


@dataclass
class ExecutorConfig:
    """How the executor runs an episode (and which AGILE components are on, for ablations)."""

    advice_cost: float = DEFAULT_ADVICE_COST
    """Cost c of one piece of advice; a question's reward is 1[correct] - c * 1[advised]."""
    use_memory: bool = True
    """Run [RetrieveMemory] / [UpdateMemory]; off for the "without memory" ablation."""
    use_tools: bool = True
    """Offer [SearchProduct] (SQL on the product table); off for the "without tools" ablation."""
    use_advice: bool = True
    """Offer [SeekAdvice]; off for the "without advice" ablation."""
    use_reflection: bool = True
    """Ask for [Reflection] after advice; off for the "without reflection" ablation."""
    k_history: int = 2
    """QA-history entries of the same product shown by [RetrieveMemory]."""
    k_knowledge: int = 2
    """Group-knowledge entries shown by [RetrieveMemory]."""
    similarity_threshold: float = 0.46
    """Cosine above which two questions count as similar (AGILE's value), for the proxy reward."""
    max_turns: int = 3
    """LLM turns allowed per session before the question is given up as wrong."""
    max_search_results: int = 10
    """Rows of a [SearchProduct] result shown and submitted."""
    keep_sessions: int = 0
    """Earlier sessions kept in the context; 0 runs [ClearContext] at every new question."""
    max_context_tokens: int = 1536
    """When the context is longer, the oldest kept sessions are dropped first."""
    budget: int | None = None
    """Advice allowed per episode when a gate decides; None: no limit."""
    store_own_answers: bool = False
    """Also file the agent's own (unverified) answers in the QA history."""
    show_product: bool = True
    """Show the product's row of the table after the question (AGILE's product metadata)."""
    restate_question: bool = False
    """State the question again after the product's row and the memory, so the LLM chooses right after
    reading it (a hundred tokens back, its phrasing is faint in the state the choice is made from). The
    session still opens with [GetQuestion], which the constrained decoder, the PRM's inputs and served
    agents read the session from."""
    list_advice_with_gate: bool = False
    """List ``[SeekAdvice]`` and its cost in the system text when a gate decides the advice too (it stays out of
    the functions the LLM may call): the agent then reads the same context whoever decides, so a gate and the
    agent's own choice are compared on the same answers (the system text otherwise differs, and the agent's
    answers with it)."""
    yes_no_threshold: float = 0.0
    """Constrained decoding: on a yes/no-phrased question the agent answers "yes" when its log-probability of the
    yes line exceeds the no line's by more than this (0: the more probable line). The embedded agent's one word is
    set by the context's form (with ``[SeekAdvice]`` listed and the question restated it answers "no" to nearly
    every one); set at the median of its own log-odds on training questions (no gold answer read:
    ``benchmarks/agents/agile_yes_no_odds.py``), its answers split by its belief instead."""
    gold_features: bool = False
    """Give the gate the dataset's question type as type_<name> features (an ablation: a deployed
    agent never has it)."""


@dataclass
class Segment:
    """A piece of the context: token ids, whether the LLM produced them, which session."""

    ids: list[int]
    text: str
    action: bool
    session: int


@dataclass
class SessionRecord:
    """One finished session: what happened, its reward, and its token ids for training."""

    episode_id: str
    group: str
    index: int
    """Session index in the episode (0-based)."""
    question_id: str
    qtype: str
    functions: list[str]
    """Every function run in the session, executor's and LLM's, in order."""
    answer: str | list[str] | None
    correct: bool
    advised: bool
    by_gate: bool
    """Advice was decided by the gate, not by the LLM."""
    reflection: str | None
    reflection_stored: bool
    reward: float
    """1[correct] - c * 1[advised] (the proxy bonus of PPO is added later)."""
    n_similar: int
    """Memory entries similar to the question when the session started."""
    similar_later: bool
    """A later question of the episode is similar to this one."""
    turns: int
    input_ids: list[int] = field(repr=False, default_factory=list)
    action_mask: list[int] = field(repr=False, default_factory=list)

    @property
    def n_action_tokens(self) -> int:
        return int(sum(self.action_mask))


def product_line(group: ProductGroup, asin: str) -> str:
    """The product's row as one line: title, then the features it has."""
    product = group.metadata.get(asin, {})
    parts = [f"{k}: {html.unescape(str(v))}" for k, v in product.items()
             if k != "title" and v not in (None, "")]
    return f"Product {asin}: {html.unescape(product.get('title', ''))}" + (f" ({'; '.join(parts)})" if parts else "")


def similar_later_flags(memory: Memory, questions: list[Question], threshold: float) -> list[bool]:
    """For each question, whether a later question of the list has cosine >= threshold with it."""
    if not questions:
        return []
    vectors = memory.embedder.encode([q.question for q in questions])
    sims = vectors @ vectors.T
    return [bool((sims[i, i + 1:] >= threshold).any()) for i in range(len(questions))]


def _clip_words(text: str, n: int = _MAX_ENTRY_WORDS) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def _answer_text(answer) -> str:
    if isinstance(answer, (list, tuple)):
        return ", ".join(answer) if answer else "none"
    return "none" if answer is None else str(answer)


class Executor:
    """Runs the sessions ``questions[0:end]`` of one episode on ``group``."""

    def __init__(self, group: ProductGroup, questions: list[Question], tokenizer, memory: Memory,
                 config: ExecutorConfig | None = None, gate=None, db: ProductDB | None = None,
                 episode_id: str | None = None, end: int | None = None):
        self.group = group
        self.questions = list(questions)
        self.tokenizer = tokenizer
        self.memory = memory
        self.config = config or ExecutorConfig()
        self.gate = gate
        self.db = db or ProductDB(group)
        self.episode_id = episode_id or f"{group.name}-{self.questions[0].id if self.questions else 'empty'}"
        self.titles = {asin: p.get("title", "") for asin, p in group.metadata.items()}
        self.records: list[SessionRecord] = []
        self.segments: list[Segment] = []
        # Advice given in this episode; the limit binds only the gate (the LLM's own [SeekAdvice]
        # is its policy's choice, counted but not refused).
        self.advice = EpisodeBudget(self.config.budget if gate is not None else None)
        self.session = 0
        self.end = len(self.questions) if end is None else min(end, len(self.questions))
        self.awaiting: str | None = None  # "decision" | "reflection" | None between sessions
        self.observation: Observation | None = None
        self._functions: list[str] = []
        self._turns = 0
        self._later = similar_later_flags(memory, self.questions, self.config.similarity_threshold)
        self._append(self._system_text(), action=False, session=-1)
        self._start_session()

    # -- the driver's interface ---------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.awaiting is None

    def prompt_ids(self) -> list[int]:
        """The context the LLM continues (all segments, in order)."""
        return [i for s in self.segments for i in s.ids]

    def context_text(self) -> str:
        return "".join(s.text for s in self.segments)

    def allowed(self) -> tuple[str, ...]:
        """The functions the LLM may call now."""
        if self.awaiting == "reflection":
            return (fn.REFLECTION,)
        if self.awaiting != "decision":
            return ()
        out = []
        if self.config.use_advice and self.gate is None:
            out.append(fn.SEEK_ADVICE)
        if self.config.use_tools:
            out.append(fn.SEARCH_PRODUCT)
        out.append(fn.PREDICT_ANSWER)
        return tuple(out)

    @property
    def question(self) -> Question:
        return self.questions[self.session]

    def act(self, action: list[int] | str) -> None:
        """Apply one LLM turn, given as generated token ids (or text, tokenised here)."""
        if self.done:
            raise RuntimeError(f"episode {self.episode_id!r} is finished; check .done before act().")
        if isinstance(action, str):
            text = action if action.endswith("\n") else action + "\n"
            ids = self._encode(text)
        else:
            ids = list(action)
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        self.segments.append(Segment(ids, text, True, self.session))
        self._turns += 1
        call = fn.parse_call(text)
        if self.awaiting == "reflection":
            self._reflect(call)
            return
        allowed = self.allowed()
        if call is None or call.name not in allowed:
            got = "nothing" if call is None else call.name
            self._retry(f"{fn.ERROR} expected one of {' '.join(allowed)}, got {got}.")
            return
        self._functions.append(call.name)
        if call.name == fn.SEEK_ADVICE:
            self.advice.spend(self.episode_id)  # the LLM's own choice: no gate, so no limit to refuse it
            self._seek_advice(by_gate=False)
        elif call.name == fn.SEARCH_PRODUCT:
            self._search(call.argument)
        else:
            self._finish(call.argument)

    def resume(self, end: int) -> None:
        """Allow the sessions up to ``end`` (exclusive); starts the next one when idle."""
        self.end = min(end, len(self.questions))
        if self.done:
            self._start_session()

    def clone(self) -> "Executor":
        """An independent copy (memory, context and records copied; data and tables shared)."""
        other = copy.copy(self)
        other.memory = self.memory.clone()
        other.segments = list(self.segments)  # segments are never mutated, only replaced
        other.records = list(self.records)
        other._functions = list(self._functions)
        other.advice = self.advice.copy()
        return other

    # -- sessions ---------------------------------------------------------------------------

    def _start_session(self) -> None:
        if self.session >= self.end:
            self.awaiting = None
            return
        q, cfg = self.question, self.config
        self._functions = []
        self._turns = 0
        self._advised = self._by_gate = False
        self._reflection: str | None = None
        self._stored = False
        # How much memory already covers this question, before this session writes anything.
        self._n_similar = self.memory.count_similar(q.question, cfg.similarity_threshold) \
            if cfg.use_memory else 0
        self._clear_context()
        self._functions.append(fn.GET_QUESTION)
        question = " ".join(q.question.split())  # one line, as the readers of [GetQuestion] take it
        text = f"{fn.GET_QUESTION} {question}\n"
        if cfg.show_product:
            text += product_line(self.group, q.asin) + "\n"
        self._append(text, action=False)
        top_similarity, retrieved_tokens, advice_hits = 0.0, 0, 0
        if cfg.use_memory:
            self._functions.append(fn.RETRIEVE_MEMORY)
            found = self.memory.retrieve(q.question, q.asin, cfg.k_history, cfg.k_knowledge)
            knowledge = " | ".join(_clip_words(e.text) for e, _ in found.knowledge) or "none"
            history = " | ".join(_clip_words(e.text) for e, _ in found.history) or "none"
            self._append(f"{fn.RETRIEVE_MEMORY}\nKnowledge: {knowledge}\nHistory: {history}\n",
                         action=False)
            scores = [s for _, s in found.knowledge + found.history]
            top_similarity = max(scores) if scores else 0.0
            retrieved_tokens = len(self.segments[-1].ids)
            advice_hits = sum(e.from_advice for e, _ in found.knowledge + found.history)
        if cfg.restate_question and (cfg.show_product or cfg.use_memory):
            self._append(f"{QUESTION_AGAIN} {question}\n", action=False)
        self._fit_context()
        self.awaiting = "decision"
        self.observation = Observation(
            # group/question: PRM folds read the product group before '/'.
            episode_id=self.episode_id, env=ENV_NAME, task_id=f"{self.group.name}/{q.id}", step=self.session,
            state_text=self.context_text(), horizon=self.end,
            # type_<name> (the ProductQA environment's names) only as the gold-features ablation:
            # a deployed agent does not know the dataset's question type.
            features={**({f"type_{t}": float(q.type == t) for t in QUESTION_TYPES} if cfg.gold_features else {}),
                      # Rounded: a cosine's last bits vary with the thread count that computed it (a Ray
                      # worker's against this process's), and a feature must not.
                      "memory_top_similarity": round(float(top_similarity), 4),
                      "memory_similar_count": float(self._n_similar),
                      # How much the executor knows: entries stored so far and the size of the
                      # [RetrieveMemory] output the LLM is about to read.
                      "memory_entries": float(len(self.memory)) if cfg.use_memory else 0.0,
                      "retrieved_tokens": float(retrieved_tokens),
                      # Retrieved entries that came from advice: what earlier help brings to this question.
                      "memory_advice_hits": float(advice_hits)},
            annotations={"question_type": q.type})
        if self.gate is not None and cfg.use_advice:
            budget_left = self._budget_left()
            # The gate must not spend what is not there; the loop enforces it as well.
            if budget_left != 0 and self.gate.should_intervene(self.observation, budget_left):
                self.seek_advice()

    def seek_advice(self) -> None:
        """Advice decided outside the LLM (a gate, or a collection loop) at this decision point:
        the human's answer is shown and submitted, after the LLM's reflection when that is on."""
        if self.awaiting != "decision" or self._turns:
            raise RuntimeError(f"episode {self.episode_id!r}: advice can only be sought at the start of a "
                               f"session, before the LLM's first turn (now: {self.awaiting or 'finished'}, "
                               f"{self._turns} turns).")
        if not self.advice.spend(self.episode_id):
            raise RuntimeError(f"episode {self.episode_id!r}: advice sought past the budget of {self.config.budget}; "
                               "seek it only while budget is left.")
        self._functions.append(fn.SEEK_ADVICE)
        self._append(f"{fn.SEEK_ADVICE}\n", action=False)
        self._seek_advice(by_gate=True)

    def _budget_left(self) -> int:
        """Advice the gate may still give; with no limit, every question left may be advised."""
        left = self.advice.left(self.episode_id)
        return self.end - self.session if left is None else left

    @property
    def advice_used(self) -> int:
        """Advice given so far in this episode (the gate's and the LLM's own)."""
        return self.advice.used(self.episode_id)

    def _seek_advice(self, by_gate: bool) -> None:
        q = self.question
        self._advised, self._by_gate = True, by_gate
        self._append(f"{fn.ADVICE} {' '.join(q.long_answer.split())}\n", action=False)
        if self.config.use_reflection:
            self.awaiting = "reflection"
        else:
            self._finish(list(q.short_answer) if q.type == "search_qa" else q.short_answer)

    def _reflect(self, call: fn.FunctionCall | None) -> None:
        q = self.question
        if call is not None and call.name == fn.REFLECTION:
            self._functions.append(fn.REFLECTION)
            self._reflection = call.argument
            if self.config.use_memory and not is_no_information(call.argument):
                self._functions.append(fn.UPDATE_MEMORY)
                self._stored = self.memory.add_knowledge(call.argument, self.session) is not None
        self._finish(list(q.short_answer) if q.type == "search_qa" else q.short_answer)

    def _search(self, sql: str) -> None:
        try:
            rows = self.db.query(sql, limit=self.config.max_search_results)
        except SQLError as error:
            self._retry(f"{fn.SEARCH_RESULT} {' '.join(error.message.split())}")
            return
        self._append(f"{fn.SEARCH_RESULT} {', '.join(rows) if rows else 'no products'}\n",
                     action=False)
        self._finish(rows)

    def _retry(self, message: str) -> None:
        if self._turns >= self.config.max_turns:
            self._finish(None)
            return
        self._append(message.rstrip("\n") + "\n", action=False)

    def _finish(self, answer) -> None:
        q, cfg = self.question, self.config
        if self._advised:
            correct = True  # the human's answer is right by definition (AGILE)
        elif answer is None:
            correct = False
        else:
            correct = is_correct(q, answer, self.titles)
        ids, mask = [], []
        for s in self.segments:
            ids += s.ids
            mask += [int(s.action and s.session == self.session)] * len(s.ids)
        if any(mask):  # tokens after the last action teach nothing; training skips them
            end = len(mask) - mask[::-1].index(1)
            ids, mask = ids[:end], mask[:end]
        self.records.append(SessionRecord(
            episode_id=self.episode_id, group=self.group.name, index=self.session,
            question_id=q.id, qtype=q.type, functions=self._functions + [fn.SUBMIT_ANSWER],
            answer=answer, correct=bool(correct), advised=self._advised, by_gate=self._by_gate,
            reflection=self._reflection, reflection_stored=self._stored,
            reward=question_reward(correct, self._advised, cfg.advice_cost),
            n_similar=self._n_similar, similar_later=self._later[self.session],
            turns=self._turns, input_ids=ids, action_mask=mask))
        self._append(f"{fn.SUBMIT_ANSWER} {_answer_text(answer)}\n", action=False)
        if cfg.use_memory and (self._advised or (cfg.store_own_answers and answer is not None)):
            stored = q.long_answer if self._advised else _answer_text(answer)
            self.memory.add_qa(q.question, stored, q.asin, self.session, from_advice=self._advised)
            self.records[-1].functions.append(fn.UPDATE_MEMORY)
            self._append(f"{fn.UPDATE_MEMORY}\n", action=False)
        self.session += 1
        self._start_session()

    # -- context ----------------------------------------------------------------------------

    def _system_text(self) -> str:
        cfg, table = self.config, self.group.name
        lines = [f"You answer customers' questions about {table.replace('_', ' ')}. "
                 f"Reply with one line:"]
        if cfg.use_tools:
            lines.append(f"{fn.SEARCH_PRODUCT} SELECT product_id FROM `{table}` WHERE ... "
                         f"(to find products)")
        lines.append(f"{fn.PREDICT_ANSWER} <short answer> (when you know it)")
        if cfg.use_advice and (self.gate is None or cfg.list_advice_with_gate):
            lines.append(f"{fn.SEEK_ADVICE} (ask a human expert; costs {cfg.advice_cost:g})")
        if cfg.use_advice and cfg.use_reflection:
            lines.append(f"After {fn.ADVICE}: {fn.REFLECTION} <general knowledge> or "
                         f"{fn.REFLECTION} no information")
        if cfg.use_tools:
            lines.append(self.db.schema_text())
        return "\n".join(lines) + "\n"

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _append(self, text: str, action: bool, session: int | None = None) -> None:
        if self.segments and not self.segments[-1].text.endswith("\n"):
            text = "\n" + text  # a turn cut at max_new_tokens: tool output starts a new line
        self.segments.append(Segment(self._encode(text), text, action,
                                     self.session if session is None else session))

    def _clear_context(self) -> None:
        keep_from = self.session - self.config.keep_sessions
        if any(0 <= s.session < keep_from for s in self.segments):
            self._functions.append(fn.CLEAR_CONTEXT)
            self.segments = [s for s in self.segments if s.session < 0 or s.session >= keep_from]

    def _fit_context(self) -> None:
        # Drop whole earlier sessions, oldest first; the system text and this session stay.
        while self._n_tokens() > self.config.max_context_tokens:
            older = [s.session for s in self.segments if 0 <= s.session < self.session]
            if not older:
                break
            oldest = min(older)
            self.segments = [s for s in self.segments if s.session != oldest]

    def _n_tokens(self) -> int:
        return sum(len(s.ids) for s in self.segments)


def records_to_jsonl(records: list[SessionRecord]) -> str:
    """Session records as JSON lines without token ids (for logs and reports)."""
    rows = []
    for r in records:
        row = {k: v for k, v in r.__dict__.items() if k not in ("input_ids", "action_mask")}
        row["n_action_tokens"] = r.n_action_tokens
        rows.append(json.dumps(row, default=lambda x: x.item() if isinstance(x, np.generic) else str(x)))
    return "\n".join(rows) + ("\n" if rows else "")
