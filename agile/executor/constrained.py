"""Constrained decoding of the AGILE policy: sensible turns from a model with no SFT.

    policy = LLMPolicy(model, tokenizer, greedy=True, decoding="constrained")

An untuned LLM prompted with the executor's context rarely writes a function call (the embedded
SmolLM2 writes a question back). Constrained decoding keeps the LLM as the decision maker and
only restricts what it may write, one turn at a time:

1. **The function.** Among the functions the executor allows now (``Executor.allowed()``), the
   one whose token sequence the model gives the highest log-probability after the context.
2. **The answer's form**, by the model's log-probability as well, never by a dataset annotation:

   - ``[SearchProduct]``: the SQL prefix ``SELECT product_id FROM `<table>` WHERE`` is given and
     the model writes the condition (greedy, up to its first ``;`` or newline); the executor
     submits the query's product ids as the answer.
   - ``[PredictAnswer]``: one candidate per form, each a whole line: ``yes``, ``no``, each
     product id the session's context shows, and the model's own greedy line (free text). The
     turn is the candidate whose line (its closing newline included) is most probable. Scoring
     whole lines is what lets the forms compete on one scale: a form wins only when the model
     puts more mass on its complete answer than on the others', so a yes/no question gets yes
     or no, and free text wins where the model continues with something else.
   - ``[Reflection]`` (after advice): the model's greedy line.
   - ``[SeekAdvice]``: the function alone.

What it reads is what a deployed agent sees: the context token ids, the allowed functions and
the context text (for the table name and the product ids shown). It never reads the session's
``Question`` (type, gold answer, gold SQL): ``tests/test_agile_constrained.py`` checks that
executors whose questions carry no annotation get the same turns.

Greedy and deterministic. Prompts go through ``agile.agents.prompt_cache.PromptKVCache``: the
system text and schema are shared by every session of a group and are computed once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from agile.agents.prompt_cache import KV, PromptKVCache, greedy_continue, score_continuations
from agile.envs.answer_eval import parse_product_ids
from agile.executor import functions as fn

YES_NO = ("yes", "no")
_TABLE = re.compile(r"FROM `([^`]+)`")
_MAX_ID_CANDIDATES = 8  # a long history could show dozens; the first few are the current session's


class ConstrainedDecoder:
    """One constrained turn per executor (see the module docstring)."""

    def __init__(self, model, tokenizer, max_new_tokens: int = 96, cache_tokens: int = 16_384):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.cache = PromptKVCache(model, cache_tokens)
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self.newlines = {i for i, p in enumerate(pieces) if "\n" in p}
        self.sql_stops = self.newlines | {i for i, p in enumerate(pieces) if ";" in p}
        eos = tokenizer.eos_token_id
        self.eos = {eos} if eos is not None else set()
        self.newline_id = self._encode("\n")[-1]
        self.choices: list[dict] = []
        """Per turn: the function, its form and the log-probabilities compared (for reports)."""

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def __call__(self, executors: Sequence) -> list[list[int]]:
        return [self.turn(e.prompt_ids(), e.allowed(), e.context_text()) for e in executors]

    def turn(self, prompt: list[int], allowed: Sequence[str], context: str) -> list[int]:
        """The token ids of one turn after ``prompt`` when ``allowed`` functions may be called."""
        if not allowed:
            raise ValueError("the executor allows no function now (its episode is finished).")
        logits, kv = self.cache.prefill(prompt)
        names = [self._encode(name) for name in allowed]
        scores = score_continuations(self.model, logits, kv, names)
        name = allowed[max(range(len(allowed)), key=scores.__getitem__)]
        choice = {"function": name, "function_logprobs": dict(zip(allowed, scores))}
        if name == fn.SEEK_ADVICE:
            ids, choice["form"] = self._encode(name) + [self.newline_id], "none"
        elif name == fn.SEARCH_PRODUCT:
            ids, choice["form"] = self._sql(prompt, context), "sql"
        elif name == fn.PREDICT_ANSWER:
            ids, choice["form"], choice["form_logprobs"] = self._answer(prompt, logits, kv, context)
        else:
            ids, choice["form"] = self._free(prompt, self._encode(name)), "free"
        self.choices.append(choice)
        return ids

    def _continue(self, prefix_ids: list[int], stops: set[int], prompt: list[int]) -> list[int]:
        logits, kv = self.cache.prefill(prompt + prefix_ids)
        return greedy_continue(self.model, [(logits, kv)], [stops], self.eos, self.max_new_tokens)[0]

    def _line_end(self, ids: list[int]) -> list[int]:
        return ids if ids and ids[-1] in self.newlines else ids + [self.newline_id]

    def _free(self, prompt: list[int], prefix_ids: list[int]) -> list[int]:
        return self._line_end(prefix_ids + self._continue(prefix_ids, self.newlines, prompt))

    def _sql(self, prompt: list[int], context: str) -> list[int]:
        tables = _TABLE.findall(context)
        table = tables[0] if tables else "products"
        prefix = self._encode(f"{fn.SEARCH_PRODUCT} SELECT product_id FROM `{table}` WHERE")
        written = self._continue(prefix, self.sql_stops, prompt)
        # The query ends at its first ';' (a small model keeps talking after it).
        text = self.tokenizer.decode(written, skip_special_tokens=True).split("\n", 1)[0]
        if ";" in text:
            return self._line_end(prefix + self._encode(" " + text.split(";", 1)[0].strip() + ";"))
        return self._line_end(prefix + written)

    def _answer(self, prompt: list[int], logits: torch.Tensor, kv: KV, context: str):
        prefix = self._encode(fn.PREDICT_ANSWER)
        free = self._free(prompt, prefix)
        session = context.rsplit(fn.GET_QUESTION, 1)[-1]  # ids shown for this question
        ids_shown = parse_product_ids(session)[:_MAX_ID_CANDIDATES]
        lines = {("yesno", a): self._encode(f"{fn.PREDICT_ANSWER} {a}\n") for a in YES_NO}
        lines.update({("ids", a): self._encode(f"{fn.PREDICT_ANSWER} {a}\n") for a in ids_shown})
        lines[("free", "")] = free
        keys = list(lines)
        scores = score_continuations(self.model, logits, kv, [lines[k] for k in keys])
        best = max(range(len(keys)), key=scores.__getitem__)
        by_form: dict[str, float] = {}
        for (form, _), score in zip(keys, scores):
            by_form[form] = max(by_form.get(form, -float("inf")), score)
        return lines[keys[best]], keys[best][0], by_form
