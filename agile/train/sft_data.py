"""Imitation data: sessions an expert agent would produce, built from ProductQA's gold annotations.

``GoldPolicy`` plays the LLM's part through the real executor, so the data is in the agent's own
format (same prompts, same memory retrieval, same tool output) and the action mask marks exactly
the turns the LLM will have to write:

- search questions: ``[SearchProduct] <gold SQL>`` (the executor runs it on the product table);
- fact and reasoning questions: ``[PredictAnswer] <gold short answer>``;
- advice on a share of the sessions whose answer memory cannot supply: a reasoning question whose
  knowledge is not in memory yet, or a fact question with no similar past question on the same
  product; with probability ``advice_share`` such a session gets ``[SeekAdvice]`` and then
  ``[Reflection] <gold knowledge>`` (``no information`` for fact questions).

So the imitation policy asks for advice when memory lacks the answer and answers from memory when
it holds it, which is the behaviour PPO then tunes against the advice cost.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from agile.envs.productqa import ProductGroup, Question
from agile import functions as fn
from agile.executor.executor import Executor, ExecutorConfig, SessionRecord
from agile.executor.memory import Embedder, Memory
from agile.executor.policy import run_executors
from agile.executor.reflection import gold_reflection


def gold_answer(question: Question) -> str:
    """The short answer as the agent writes it (product ids joined by commas for search)."""
    if question.type == "search_qa":
        return ", ".join(question.short_answer) if question.short_answer else "none"
    return str(question.short_answer)


class GoldPolicy:
    """The expert's turns, from the gold annotations (see the module docstring)."""

    def __init__(self, advice_share: float = 0.5, seed: int = 0):
        if not 0.0 <= advice_share <= 1.0:
            raise ValueError(f"advice_share must be in [0, 1], got {advice_share}")
        self.advice_share = advice_share
        self.rng = random.Random(seed)

    def __call__(self, executors) -> list[str]:
        return [self.turn(e) for e in executors]

    def turn(self, executor: Executor) -> str:
        q = executor.question
        if executor.awaiting == "reflection":
            return fn.format_call(fn.REFLECTION, gold_reflection(q))
        allowed = executor.allowed()
        if fn.SEEK_ADVICE in allowed and self.memory_lacks_answer(executor) \
                and self.rng.random() < self.advice_share:
            return fn.format_call(fn.SEEK_ADVICE)
        if q.type == "search_qa" and fn.SEARCH_PRODUCT in allowed and q.gold_sql:
            return fn.format_call(fn.SEARCH_PRODUCT, q.gold_sql)
        return fn.format_call(fn.PREDICT_ANSWER, gold_answer(q))

    @staticmethod
    def memory_lacks_answer(executor: Executor) -> bool:
        q, memory = executor.question, executor.memory
        if q.type == "search_qa":
            return False  # the product table answers it
        if q.type == "reasoning_qa":
            return not memory.has_knowledge(gold_reflection(q))
        sims = memory.similarities(q.question)
        same_product = [i for i, e in enumerate(memory.entries) if e.kind == "qa" and e.asin == q.asin]
        threshold = executor.config.similarity_threshold
        return not any(sims[i] >= threshold for i in same_product)


def build_sft_records(groups: list[ProductGroup], tokenizer, embedder: Embedder,
                      questions_per_group: int, config: ExecutorConfig | None = None,
                      advice_share: float = 0.5, seed: int = 0) -> list[SessionRecord]:
    """Run the gold policy over the first ``questions_per_group`` questions of every group."""
    if questions_per_group <= 0:
        raise ValueError(f"questions_per_group must be > 0, got {questions_per_group}")
    executors = [Executor(g, g.questions[:questions_per_group], tokenizer, Memory(embedder),
                          config or ExecutorConfig(), episode_id=f"sft-{g.name}")
                 for g in groups]
    run_executors(executors, GoldPolicy(advice_share, seed))
    return [r for e in executors for r in e.records]


def save_records(records: list[SessionRecord], path: str | Path) -> Path:
    """One JSON line per session: ``input_ids``, ``action_mask`` and the session's outcome."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps({"episode_id": r.episode_id, "question_id": r.question_id,
                                "functions": r.functions, "advised": r.advised,
                                "input_ids": r.input_ids, "action_mask": r.action_mask}) + "\n")
    return path


def load_samples(path: str | Path) -> list[tuple[list[int], list[int]]]:
    """``(input_ids, action_mask)`` pairs from a file written by ``save_records``."""
    out = []
    with Path(path).open() as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{lineno}: not a JSON line ({error.msg}); rebuild the file with "
                                 "save_records.") from error
            if len(row.get("input_ids", [])) != len(row.get("action_mask", [])):
                raise ValueError(f"{path}:{lineno}: input_ids and action_mask differ in length; "
                                 "rebuild the file with save_records.")
            out.append((row["input_ids"], row["action_mask"]))
    return out
