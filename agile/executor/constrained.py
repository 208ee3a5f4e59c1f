"""Constrained decoding of the AGILE policy: sensible turns from a model with no SFT.

    policy = LLMPolicy(model, tokenizer, greedy=True, decoding="constrained")

An untuned LLM prompted with the executor's context rarely writes a function call (the embedded
SmolLM2 writes a question back). Constrained decoding keeps the LLM as the decision maker and
only restricts what it may write, one turn at a time:

1. **The function.** Among the functions the executor allows now (``Executor.allowed()``), the
   one whose token sequence the model gives the highest log-probability after the context.
2. **The answer's form**, by the model's log-probability as well, never by a dataset annotation:

   - ``[SearchProduct]``: the query is built in the grammar of ``agile.executor.sql_grammar``
     (conditions on the table's own columns and values, then an ending), each unit the most
     probable of the grammar's choices: a column, its value, then ``AND`` or an ending. Every
     such query runs; the executor submits its product ids as the answer. (Writing the
     ``WHERE`` freely, SmolLM2-135M's queries failed to run in 15 of 16 shared test sessions.)
   - ``[PredictAnswer]``: one candidate per form, each a whole line: ``yes``, ``no``, each
     product id the session's context shows, and the model's own greedy line (free text). The
     turn is the candidate whose line (its closing newline included) is most probable. Scoring
     whole lines is what lets the forms compete on one scale: a form wins only when the model
     puts more mass on its complete answer than on the others', and free text wins where the
     model continues with something else.

   **The question's wording** restricts the forms first
   (``agile.envs.phrasing.is_yes_no_question``): a question phrased as a yes/no question is
   answered ``yes`` or ``no`` and is not searched (a search answers with product ids, which can
   never answer it). Asked about every question, SmolLM2-135M puts more mass on
   ``[SearchProduct]`` than on ``[PredictAnswer]`` for all of them (46 of 46 turns on shared
   test sessions); among the questions not phrased so, most are search questions.
   - ``[Reflection]`` (after advice): the model's greedy line.
   - ``[SeekAdvice]``: the function alone.

3. **What the choice says of itself** (``choices[i]["signals"]``, the agent's ``Action.signals``, logged as
   ``proposal_signals``): ``function_margin``, the chosen function's log-probability minus the runner-up's
   (where two or more were allowed); for an answer, ``answer_margin`` (the chosen line against the best
   other line) and ``answer_logprob`` (the chosen line's log-probability per token). Absent keys are
   missing, not zero.

What it reads is what a deployed agent sees: the context token ids, the allowed functions, the
context text (the question's wording and the product ids shown) and the table it may query
(its columns and the values in them). It never reads the session's
``Question`` (type, gold answer, gold SQL): ``tests/agile/executor/test_agile_constrained.py`` checks that
executors whose questions carry no annotation get the same turns.

**Batched.** A turn is written as a generator of model requests (score these lines after this prompt;
continue this prompt greedily). A call with many executors (a lockstep round) advances every turn one
request at a time and answers a round's requests together: prompts prefilled in batched forwards
(``PromptKVCache.prefill_many``), candidate lines scored in packed forwards
(``agile.agents.batch_forward.score_many``), free lines decoded in one batch (``greedy_continue``).
Decoding at batch one is bound by reading the weights, so a round costs little more than one turn.
The turns are those written one at a time (``batched=False``) up to float rounding in near-ties
(``benchmarks/speed/collect.py`` counts identical actions). A session whose turn fails is named in a
``TurnError`` after the round's other turns are written. A free answer line is decoded only while it
could still be the best or second-best line (``cut_lines``): the choice and its margins are unchanged.

Greedy and deterministic, unless ``sample_functions``: PPO's rollouts then draw the function from the
softmax of the allowed functions' log-probabilities (a seeded stream) and record the draw
(``choices[i]["decision"]``: prompt, candidates, chosen, its renormalised log-probability) for
``agile.train.choices``; the answer's form stays the most probable. With ``vote`` (the compute help,
``agile.executor.self_consistency``) the turn is the majority of the k consistency samples
(``agile.executor.consistency``), drawn from a seed per decision where the call gives one. Prompts go through
``agile.agents.prompt_cache.PromptKVCache``: the system text and schema are shared by every session
of a group and are computed once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from agile.agents.batch_forward import kv_bytes_per_token, score_many
from agile.agents.prompt_cache import PromptKVCache, greedy_continue, score_continuations
from agile.executor.choice_head import choice_state
from agile.envs.answer_eval import parse_product_ids
from agile.envs.phrasing import is_yes_no_question
from agile import functions as fn
from agile.executor.consistency import answer_key, consistency_signals, decision_rng, draw, majority
from agile.executor.sql_grammar import MAX_CONDITIONS, SQLGrammar
from agile.seeding import derive_seed

YES_NO = ("yes", "no")
_MAX_ID_CANDIDATES = 8  # a long history could show dozens; the first few are the current session's
_SCORED_TOKENS = 16_384  # prompt tokens x candidates per scoring pass: bounds the copied keys and values
MAX_CACHE_BYTES = 4 << 30
"""The most a prompt cache grows to for a round's prompts (``fit_cache``): 93,000 tokens of SmolLM2-135M in float32."""
_CUT_MARGIN = 1e-3  # log-probability: float rounding between decoding and scoring a line stays far below it


class ConstrainedDecoder:
    """One constrained turn per executor (see the module docstring)."""

    def __init__(self, model, tokenizer, max_new_tokens: int = 96, cache_tokens: int = 16_384,
                 samples: int = 0, seed: int = 0, sample_functions: bool = False, batched: bool = True,
                 cut_lines: bool = True, vote: bool = False):
        if samples < 0:
            raise ValueError(f"samples must be >= 0 (0: off), got {samples}.")
        if vote and (samples < 1 or sample_functions):
            raise ValueError(f"vote=True takes the majority of the consistency samples: give samples >= 1 (got "
                             f"{samples}) and leave sample_functions off.")
        self.vote = bool(vote)
        """A turn is the majority of its ``samples`` (``agile.executor.consistency.majority``), not the greedy one."""
        self.batched = bool(batched)
        """Turns of one call advance together, their forwards batched (False: one turn after another)."""
        self.fit_cache = True
        """Grow the prompt cache to the round's prompts (see ``_fit_cache``)."""
        self.cut_lines = bool(cut_lines)
        """A free answer line stops decoding once it can no longer be the best or second-best line."""
        self.lines_cut = 0
        """Free answer lines cut so."""
        self.samples, self.seed = int(samples), int(seed)
        """Turns sampled beside each greedy one for the consistency signals (``agile.executor.consistency``)."""
        self.sample_functions = bool(sample_functions)
        self.function_rng = np.random.default_rng(derive_seed(seed, "functions"))
        """The stream the functions are drawn from when ``sample_functions`` (a PPO rollout)."""
        self.turn_seconds = 0.0
        self.sample_seconds = 0.0
        """Seconds spent on turns, and the part of them spent on consistency samples (their cost)."""
        # A LoRA-wrapped model runs as its base model: the adapters live in its layers, and its forward
        # takes the key/value cache under the current keyword.
        self.model = model = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.cache = PromptKVCache(model, cache_tokens)
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self.newlines = {i for i, p in enumerate(pieces) if "\n" in p}
        eos = tokenizer.eos_token_id
        self.eos = {eos} if eos is not None else set()
        self.newline_id = self._encode("\n")[-1]
        self._grammars: dict[int, tuple] = {}
        self.choices: list[dict] = []
        """Per turn: the function, its form and the log-probabilities compared (for reports)."""
        self.choice_head = None
        """A ``ChoiceHead`` that moves ``[SeekAdvice]``'s score by the choice state (``agile.executor.choice_head``;
        PPO's ``choice_head``, or loaded with a model folder that has one); None: the model's scores alone."""
        self.ask_shift = 0.0
        """Added to ``[SeekAdvice]``'s score at every choice that offers it (after the head): the same agent asking
        more or less often, by a threshold on its own ask score (``shift_for_rate``)."""

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.no_grad()
    def __call__(self, executors: Sequence, seeds: Sequence[int] | None = None) -> list[list[int]]:
        """One turn per executor. Batched (the default): the turns advance together, each round's
        forwards shared (see ``_serve``); else one turn after another, as a single agent would run.
        ``seeds``: one per executor, the seed of its turn's samples (default: the decoder's seed and the prompt)."""
        if seeds is not None and len(seeds) != len(executors):
            raise ValueError(f"{len(seeds)} seeds for {len(executors)} executors; give one seed per executor.")
        if self.fit_cache:
            self._fit_cache(executors)
        jobs = [self._job(e, None if seeds is None else seeds[i]) for i, e in enumerate(executors)]
        start = time.perf_counter()
        try:
            turns, choices, errors = self._drive(jobs) if self.batched else self._drive_alone(jobs)
        finally:
            self.turn_seconds += time.perf_counter() - start
        self.choices.extend(c for c in choices if c is not None)
        if errors:
            i, error = errors[0]
            name = getattr(executors[i], "episode_id", None) or f"executor {i}"
            raise TurnError(f"session {name}: {error}" + (f" (and {len(errors) - 1} more sessions of this round)"
                                                          if len(errors) > 1 else "")) from error
        return turns

    def _fit_cache(self, executors) -> None:
        """Grow the prompt cache to hold the round's prompts and their turns' extensions: each session's next
        turn extends its own prompt, which a cache smaller than the round would have evicted by then (every
        turn would then prefill its whole prompt again). Bounded by ``MAX_CACHE_BYTES``; never shrinks."""
        need = int(1.5 * sum(len(e.prompt_ids()) for e in executors if not getattr(e, "done", False)))
        cap = MAX_CACHE_BYTES // kv_bytes_per_token(self.model)
        self.cache.max_tokens = max(self.cache.max_tokens, min(need, cap))

    def _job(self, executor, seed: int | None = None):
        # A PPO rollout's copies of one session draw their first function without replacement (``spread_draw``,
        # set by ``agile.train.ppo.collect``); read once, so the session's later turns sample as usual.
        spread, executor.spread_draw = getattr(executor, "spread_draw", None), None
        try:
            threshold = getattr(getattr(executor, "config", None), "yes_no_threshold", 0.0)
            return self._turn_steps(executor.prompt_ids(), executor.allowed(), executor.context_text(),
                                    self._grammar(executor), spread, threshold, seed)
        except Exception as error:  # noqa: BLE001 - reported with the session's name, after the others
            return _failed(error)

    def _grammar(self, executor) -> SQLGrammar:
        db = executor.db
        if id(db) not in self._grammars:  # one table per group, shared by its executors
            self._grammars[id(db)] = (db, SQLGrammar.of(db))
        return self._grammars[id(db)][1]

    # The drivers: a turn is a generator of model requests (``_Score``, ``_Continue``), answered in order.

    def _drive(self, jobs):
        """Advance every turn one request per round; a round's requests are answered together."""
        turns, choices, errors = [None] * len(jobs), [None] * len(jobs), []
        pending: dict[int, object] = {}
        for i, job in enumerate(jobs):
            self._advance(i, job, None, pending, turns, choices, errors)
        while pending:
            indices = list(pending)
            answers = self._serve_round([pending[i] for i in indices])
            for i, answer in zip(indices, answers):
                request = pending.pop(i)
                if isinstance(answer, Exception):
                    errors.append((i, answer))
                    continue
                self._advance(i, jobs[i], answer, pending, turns, choices, errors, request)
        return turns, choices, sorted(errors, key=lambda e: e[0])

    def _drive_alone(self, jobs):
        """One turn after another, each request answered alone (the unbatched path)."""
        turns, choices, errors = [None] * len(jobs), [None] * len(jobs), []
        for i, job in enumerate(jobs):
            pending: dict[int, object] = {}
            self._advance(i, job, None, pending, turns, choices, errors)
            while pending:
                request = pending.pop(i)
                started = time.perf_counter()
                try:
                    answer = self._serve_alone(request)
                except Exception as error:  # noqa: BLE001 - the session's own error, reported by name
                    errors.append((i, error))
                    break
                self._count_sampling([request], time.perf_counter() - started)
                self._advance(i, job, answer, pending, turns, choices, errors, request)
        return turns, choices, errors

    def run_alone(self, steps):
        """The value of a generator of requests (a turn, or part of one), each request answered alone."""
        request = next(steps)
        while True:
            try:
                request = steps.send(self._serve_alone(request))
            except StopIteration as stop:
                return stop.value

    def _advance(self, i, job, answer, pending, turns, choices, errors, request=None) -> None:
        try:
            pending[i] = job.send(answer) if request is not None else next(job)
        except StopIteration as stop:
            turns[i], choices[i] = stop.value
        except Exception as error:  # noqa: BLE001 - one malformed session must not take the round down
            errors.append((i, error))

    def _serve_round(self, requests: list) -> list:
        """Answers to one round's requests: the prompts prefilled in batched forwards, then the
        candidate lines of every ``_Score`` in packed forwards and every ``_Continue`` decoded in one
        batch. A failing batch is retried request by request, so the error stays with its session."""
        started = time.perf_counter()
        try:
            answers = self._serve_batched(requests)
        except Exception:  # noqa: BLE001
            answers = []
            for request in requests:
                try:
                    answers.append(self._serve_alone(request))
                except Exception as error:  # noqa: BLE001
                    answers.append(error)
        self._count_sampling(requests, time.perf_counter() - started)
        return answers

    def _serve_batched(self, requests: list) -> list:
        need = [i for i, r in enumerate(requests) if not (isinstance(r, _Score) and r.state is not None)]
        states = dict(zip(need, self.cache.prefill_many([requests[i].prompt for i in need])))
        answers: list = [None] * len(requests)
        scored = [i for i, r in enumerate(requests) if isinstance(r, _Score)]
        rows = [(requests[i].state or states[i]) for i in scored]
        for i, row, scores in zip(scored, rows, score_many(self.model, [(*row, requests[i].lines) for i, row
                                                                         in zip(scored, rows)])):
            answers[i] = (scores, row)
        continued = [i for i, r in enumerate(requests) if isinstance(r, _Continue)]
        if continued:
            outputs, cut = greedy_continue(self.model, [states[i] for i in continued],
                                           [requests[i].stops for i in continued], self.eos, self.max_new_tokens,
                                           floors=[requests[i].floor for i in continued])
            for i, ids, was_cut in zip(continued, outputs, cut):
                answers[i] = ids, was_cut
        return answers

    def _serve_alone(self, request):
        if isinstance(request, _Continue):
            logits, kv = self.cache.prefill(request.prompt)
            outputs, cut = greedy_continue(self.model, [(logits, kv)], [request.stops], self.eos, self.max_new_tokens,
                                           floors=[request.floor])
            return outputs[0], cut[0]
        logits, kv = request.state or self.cache.prefill(request.prompt)
        # Passes small enough that the keys and values copied per candidate stay bounded.
        per_pass = max(1, _SCORED_TOKENS // max(len(request.prompt), 1))
        scores: list[float] = []
        for begin in range(0, len(request.lines), per_pass):
            scores += score_continuations(self.model, logits, kv, request.lines[begin:begin + per_pass])
        return scores, (logits, kv)

    def _count_sampling(self, requests: list, seconds: float) -> None:
        """The consistency samples' share of the time, a round's time split evenly over its requests."""
        sampling = sum(getattr(r, "sampling", False) for r in requests)
        if sampling:
            self.sample_seconds += seconds * sampling / len(requests)

    # One turn, as a generator of requests (see the module docstring for what it chooses).

    def _turn_steps(self, prompt, allowed, context, grammar, spread=None, yes_no_threshold: float = 0.0,
                    seed: int | None = None):
        if not allowed:
            raise ValueError("the executor allows no function now (its episode is finished).")
        yes_no = is_yes_no_question(fn.current_question(context))
        candidates = [a for a in allowed if not (yes_no and a == fn.SEARCH_PRODUCT and fn.PREDICT_ANSWER in allowed)]
        names = [self._encode(name) for name in candidates]
        scores, state = yield _Score(prompt, names)
        base_scores, hidden = scores, None
        shifts = fn.SEEK_ADVICE in candidates and len(candidates) > 1
        if shifts and self.choice_head is not None:
            hidden = choice_state(self.model, prompt, state[1])
            scores = self.choice_head.shifted(scores, candidates, hidden)
        if shifts and self.ask_shift:
            scores = list(scores)
            scores[candidates.index(fn.SEEK_ADVICE)] += self.ask_shift
        pick = max(range(len(candidates)), key=scores.__getitem__)
        choice = {"function_logprobs": dict(zip(candidates, scores)), "yes_no_question": yes_no}
        if shifts and (hidden is not None or self.ask_shift):
            ask = candidates.index(fn.SEEK_ADVICE)
            choice["ask_shift"] = float(scores[ask] - base_scores[ask])
        if self.sample_functions and len(candidates) > 1:
            pick = draw(self.function_rng, scores, 1)[0] if spread is None else self._spread_pick(scores, *spread)
            logps = np.asarray(scores, dtype=np.float64) - np.logaddexp.reduce(scores)
            choice["decision"] = {"prompt": list(prompt), "candidates": names, "chosen": pick,
                                  "logp": float(logps[pick]), "logps": logps.tolist(),
                                  "functions": list(candidates), "yes_no": yes_no, "spread": spread is not None,
                                  "base_scores": list(map(float, base_scores)), "state": hidden}
        name = choice["function"] = candidates[pick]
        signals = {}
        if len(scores) > 1:
            signals["function_margin"] = _margin(scores)
        answers = None  # (lines, scores) of the answer candidates, once scored
        if name == fn.SEEK_ADVICE:
            ids, choice["form"] = self._encode(name) + [self.newline_id], "none"
        elif name == fn.SEARCH_PRODUCT:
            ids, choice["form"] = (yield from self._grammar_sql(prompt, grammar)), "sql"
        elif name == fn.PREDICT_ANSWER:
            answers = yield from self._answer_lines(prompt, state, context, yes_no, yes_no_threshold=yes_no_threshold)
            ids, choice["form"], choice["form_logprobs"] = _best_answer(*answers)
            signals["answer_margin"] = _margin(answers[1])
            signals["answer_logprob"] = max(answers[1]) / max(len(ids), 1)
        else:
            ids, choice["form"] = (yield from self._free(prompt, self._encode(name))), "free"
        choice["turn"] = self.tokenizer.decode(ids, skip_special_tokens=True).rstrip("\n")
        if self.samples:
            if answers is None and fn.PREDICT_ANSWER in candidates:
                answers = yield from self._answer_lines(prompt, state, context, yes_no, sampling=True,
                                                        yes_no_threshold=yes_no_threshold)
            line_keys = _line_keys(answers, self.tokenizer)
            rng = decision_rng(self.seed, prompt) if seed is None else np.random.default_rng(seed)
            drawn = _draw_turns(rng, candidates, scores, answers, line_keys, self.samples)
            greedy = answer_key(choice["turn"]) if name == fn.PREDICT_ANSWER else _turn_key(name)
            signals.update(consistency_signals(greedy, drawn))
            if self.vote:
                options = _turn_options(candidates, scores, answers, line_keys)
                won = majority(drawn, greedy, {key: option[0] for key, option in options.items()})
                choice["vote"] = {"greedy": greedy, "turn": won, "count": drawn.count(won), "samples": len(drawn)}
                if won != greedy:
                    ids = yield from self._voted_turn(prompt, grammar, answers, options[won], choice)
        choice["signals"] = signals
        return ids, choice

    def _voted_turn(self, prompt, grammar, answers, option, choice):
        """The ids of the turn that won the vote (``option``: its ``_turn_options`` entry), written as the greedy
        turn of its function would be; ``choice`` is told the function, form and turn."""
        _, name, line = option
        if line is not None:  # an answer line: its ids as scored
            key = list(answers[0])[line]
            ids, choice["form"] = answers[0][key], key[0]
        elif name == fn.SEARCH_PRODUCT:
            ids, choice["form"] = (yield from self._grammar_sql(prompt, grammar)), "sql"
        elif name == fn.SEEK_ADVICE:
            ids, choice["form"] = self._encode(name) + [self.newline_id], "none"
        else:
            ids, choice["form"] = (yield from self._free(prompt, self._encode(name))), "free"
        choice["function"] = name
        choice["turn"] = self.tokenizer.decode(ids, skip_special_tokens=True).rstrip("\n")
        return ids

    def _spread_pick(self, scores, key, copy: int) -> int:
        """Copy ``copy`` of the session keyed ``key``: the ``copy``-th function of one draw without replacement
        from the softmax of ``scores`` (Gumbel top-k; every copy of the session sees the same Gumbel noise),
        wrapping round when there are more copies than functions."""
        rng = np.random.default_rng(derive_seed(self.seed, "spread", key))
        order = np.argsort(-(np.asarray(scores, dtype=np.float64) + rng.gumbel(size=len(scores))), kind="stable")
        return int(order[copy % len(scores)])

    def _most_probable(self, prompt: list[int], units: list[str]):
        """Index of the unit the model finds most probable after ``prompt``."""
        scores, _ = yield _Score(prompt, [self._encode(u) for u in units])
        return max(range(len(units)), key=scores.__getitem__)

    def _grammar_sql(self, prompt: list[int], grammar: SQLGrammar):
        ids = self._encode(f"{fn.SEARCH_PRODUCT} {grammar.prefix()}")
        used: set[str] = set()
        for k in range(MAX_CONDITIONS):
            columns = grammar.columns(used)
            if k > 0:
                endings = grammar.endings()
                options = endings + ([" AND"] if columns else [])
                pick = options[(yield from self._most_probable(prompt + ids, options))]
                if pick != " AND":
                    return self._line_end(ids + self._encode(pick))
                ids += self._encode(pick)
            if not columns:
                break
            unit = columns[(yield from self._most_probable(prompt + ids, columns))]
            ids += self._encode(unit)
            name = grammar.name_of(unit)
            used.add(name)
            values = grammar.values(name)
            ids += self._encode(values[(yield from self._most_probable(prompt + ids, values))])
        endings = grammar.endings()
        return self._line_end(ids + self._encode(endings[(yield from self._most_probable(prompt + ids, endings))]))

    def _line_end(self, ids: list[int]) -> list[int]:
        return ids if ids and ids[-1] in self.newlines else ids + [self.newline_id]

    def _free(self, prompt: list[int], prefix_ids: list[int], sampling: bool = False):
        continuation, _ = yield _Continue(prompt + prefix_ids, self.newlines, sampling)
        return self._line_end(prefix_ids + continuation)

    def _answer_lines(self, prompt: list[int], state, context: str, yes_no: bool = False, sampling: bool = False,
                      yes_no_threshold: float = 0.0):
        """The candidate answer lines, keyed ``(form, answer)``, and their log-probabilities (on a yes/no-phrased
        question the yes line's less ``yes_no_threshold``: ``ExecutorConfig.yes_no_threshold``).

        With ``cut_lines`` (and no consistency samples, which draw from every line's probability), the
        fixed lines are scored first and the free line is decoded only while it could still be the best
        or second-best line (``greedy_continue``'s floor: the second-best fixed line, less a margin for
        float rounding); a line cut so is never chosen and leaves the margins as they are, and its
        recorded log-probability is the upper bound it had reached."""
        lines = {("yesno", a): self._encode(f"{fn.PREDICT_ANSWER} {a}\n") for a in YES_NO}
        if yes_no:  # the wording asks for yes or no: the other forms are not offered
            scores, _ = yield _Score(prompt, list(lines.values()), state, sampling)
            return lines, [scores[0] - yes_no_threshold, *scores[1:]]
        session = context.rsplit(fn.GET_QUESTION, 1)[-1]  # ids shown for this question
        ids_shown = parse_product_ids(session)[:_MAX_ID_CANDIDATES]
        lines.update({("ids", a): self._encode(f"{fn.PREDICT_ANSWER} {a}\n") for a in ids_shown})
        prefix = self._encode(fn.PREDICT_ANSWER)
        if not (self.cut_lines and not self.samples):
            lines[("free", "")] = yield from self._free(prompt, prefix, sampling)
            scores, _ = yield _Score(prompt, list(lines.values()), state, sampling)
            return lines, scores
        fixed, _ = yield _Score(prompt, list(lines.values()) + [prefix], state, sampling)
        fixed, prefix_score = fixed[:-1], fixed[-1]
        second = sorted(fixed, reverse=True)[1]
        continuation, cut = yield _Continue(prompt + prefix, self.newlines, sampling,
                                            floor=second - prefix_score - _CUT_MARGIN)
        lines[("free", "")] = free = self._line_end(prefix + continuation)
        if cut:
            self.lines_cut += 1
            return lines, fixed + [second - _CUT_MARGIN]
        exact, _ = yield _Score(prompt, [free], state, sampling)
        return lines, fixed + exact


def _failed(error: Exception):
    raise error
    yield  # a generator: the error surfaces when the driver starts it, like any turn's own


class TurnError(RuntimeError):
    """A session's turn could not be written (the round's other sessions were finished first)."""


@dataclass
class _Score:
    """Log-probabilities of ``lines`` after ``prompt`` (from ``state``, the prompt's prefill, when known)."""

    prompt: list[int]
    lines: list[list[int]]
    state: tuple | None = None
    sampling: bool = False


@dataclass
class _Continue:
    """The greedy continuation of ``prompt`` up to a token of ``stops`` (answered with the ids and whether
    it was cut at ``floor``: see ``greedy_continue``)."""

    prompt: list[int]
    stops: set[int]
    sampling: bool = False
    floor: float = -float("inf")


def _best_answer(lines: dict, scores: list[float]):
    """The most probable line's ids, its form, and the best log-probability of each form."""
    keys = list(lines)
    best = max(range(len(keys)), key=scores.__getitem__)
    by_form: dict[str, float] = {}
    for (form, _), score in zip(keys, scores):
        by_form[form] = max(by_form.get(form, -float("inf")), score)
    return lines[keys[best]], keys[best][0], by_form


def _line_keys(answers, tokenizer) -> list[str]:
    """The key (``answer_key``) of each answer line; none where no answer was scored."""
    return [] if answers is None else [answer_key(tokenizer.decode(line, skip_special_tokens=True))
                                       for line in answers[0].values()]


def _turn_options(functions, function_scores, answers, line_keys) -> dict[str, tuple[float, str, int | None]]:
    """Every turn a sample can be, by its key: the log-probability that one sample is it (summed over the lines
    of that key), its function, and for an answer the index of its most probable line (the one it is written as)."""
    logp = np.asarray(function_scores, dtype=np.float64)
    logp = logp - np.logaddexp.reduce(logp)
    options: dict[str, tuple[float, str, int | None]] = {}
    for name, lp in zip(functions, logp):
        if name != fn.PREDICT_ANSWER:
            options[_turn_key(name)] = (float(lp), name, None)
        elif answers is not None:
            scores = np.asarray(answers[1], dtype=np.float64)
            line_logp = scores - np.logaddexp.reduce(scores)
            for j in np.argsort(-scores, kind="stable"):  # most probable first: a key keeps its best line
                total, _, best = options.get(line_keys[j], (-np.inf, name, int(j)))
                options[line_keys[j]] = (float(np.logaddexp(total, lp + line_logp[j])), name, best)
    return options


def _draw_turns(rng, functions, function_scores, answers, line_keys, k: int) -> list[str]:
    """The keys of ``k`` turns drawn from the turn's log-probabilities: a function, then for an answer a line."""
    drawn = []
    for f in draw(rng, function_scores, k):
        name = functions[f]
        drawn.append(line_keys[draw(rng, answers[1], 1)[0]] if name == fn.PREDICT_ANSWER else _turn_key(name))
    return drawn


def _turn_key(function: str) -> str:
    """A sampled turn that is not an answer counts by its function (a query is not sampled)."""
    return {fn.SEARCH_PRODUCT: "search", fn.SEEK_ADVICE: "advice"}.get(function, function)


def _margin(scores: Sequence[float]) -> float:
    """Best minus second-best log-probability: how sure the model was of its choice."""
    top = sorted(scores, reverse=True)
    return float(top[0] - top[1])

