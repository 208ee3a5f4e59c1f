"""An LLM agent for ProductQA that speaks AGILE's function tokens, batched across episodes.

    agent = LLMAgent("smollm2")            # or "tiny", a Hugging Face id, a local folder
    actions = agent.act(observations)      # one action per observation, one model call per round

Each observation is answered in one of four modes, which the agent chooses itself from what a
deployed agent sees (``modes``):

- after a search (a ``[SearchResult]`` line in the state): ``ids``;
- a question phrased as a yes/no question (``is_yes_no_question``): ``yesno``, the form the
  question itself asks for;
- any other question: search or answer in free text, by the model's own log-probability of the
  two function tokens, ``[SearchProduct]`` against ``[PredictAnswer]``, after the state and an
  instruction that offers both (the principle of the AGILE policy's constrained decoding,
  ``agile.executor.constrained``); ``search_bias`` is added to the search-minus-answer margin
  (0 by default). The decision prompt shares its start with the answer prompts, so the prompt
  cache computes only the instruction's tokens again.

Why the phrasing first: asked about every question, SmolLM2-135M prefers ``[SearchProduct]``
for all of them (16 of 16 shared test questions, yes/no ones included: never-ask accuracy 0),
while a yes/no question is answered yes or no whatever its dataset type. Among the questions
not phrased so, most are search questions (54% of the shared train split), where its
preference for a search is the right call.

The dataset's question type is never read (an observation's ``annotations`` are not looked at):
``mode_choice="question_type"`` restores the earlier rule that read it (``annotated_mode``), as
an ablation that measures what the annotation was worth. The modes:

- ``sql`` (a search question before its search): the model writes the ``WHERE`` part of
  ``[SearchProduct] SELECT product_id FROM `<table>` WHERE ...`` (the prefix is given, so the
  output is always a query); the environment runs it and shows the result.
- ``ids`` (a search question after its search): the model is prompted with the result to write
  ``[PredictAnswer] <product ids>``. Fallback: when its answer names no product id and does not
  say ``none``, the first id of the search result is used (``# fallback`` note in the action).
  When the search found nothing or failed, the answer is ``none`` without a model call.
- ``yesno`` (reasoning questions, and fact questions phrased as yes/no: they start with
  do/is/can/...): instead of generating, one forward pass compares the log-probabilities of
  " yes"/" Yes" against " no"/" No" after ``[PredictAnswer]``. This is faster than generation
  and always well formed. ``yes_bias`` is added to the yes-minus-no log-probability margin
  (0 by default). Measured with SmolLM2-135M on 80 real train questions, the margin carries no
  usable signal (ROC AUC 0.39 on fact, 0.56 on reasoning) and leans to "no", while "yes" is the
  majority gold answer of fact questions: accuracy there is set by the lean, not by the question.
- ``free`` (other fact questions): ``[PredictAnswer]`` followed by the model's first line.

Greedy decoding on a CPU (the default there) goes through ``agile.agents.prompt_cache``: each prompt is
prefilled alone, reusing the keys and values of the longest token prefix it shares with a recent
prompt (the answer to a search question repeats the whole prompt that wrote its query; every
prompt shares the chat header), then the rows that need text are decoded together, each leaving
the batch at its first newline (a query also at its first ``;``: the rest is cut anyway). Same
actions as without the cache, up to float rounding (``prefix_cache_tokens=0`` turns it off).
Otherwise observations that need text are generated together in one ``generate`` call (left
padding, greedy unless ``temperature > 0``); ``yesno`` observations share one forward pass. On a
CPU the batch is split by prompt length so that padding stays under ``cpu_padding`` (there a
padded token costs as much as a real one and batching brings no speed-up per token). With
``constrained=False`` no function token is given: the model writes the whole line, and a line
without a function token falls back to ``[PredictAnswer] <the line>`` with a ``# fallback``
note (``[SeekAdvice]`` is kept as is). The action's first line is what the environment reads;
later lines are notes.

Every model answer carries the model's own confidence in ``Action.signals`` (free: read from
logits the call computes anyway; the chosen actions are the same with or without them):

- ``answer_logprob``: mean log-probability of the generated answer tokens (up to and including
  the token that ends it: a newline, an end token or, for a query, the first ``;``), or for a
  ``yesno`` question the log-probability of the chosen option (" yes"/" Yes" pooled, or "no");
- ``margin``: top-1 minus top-2 log-probability at the first answer token, or |yes - no|;
- ``entropy``: of the first answer token's distribution (nats), or of yes against no.

Probabilities are the model's own (temperature 1, before ``yes_bias``). An answer given without
a model call (``none`` after an empty search) has no signals.

Self-consistency (``consistency_samples=k > 0``, greedy agents only): after the greedy answer, k
more answers are sampled at ``consistency_temperature`` from the same prefilled prompt (its keys
and values are shared by the k rows: the prompt is prefilled once, ``prompt_cache.sample_continue``;
a ``yesno`` answer draws k times from its yes/no distribution; a sample is cut ``SAMPLE_SLACK``
tokens past the greedy answer's length). Two more signals:

- ``consistency_agree``: the share of the k samples whose action (first line, case and spaces
  normalised) equals the greedy one;
- ``consistency_entropy``: the entropy (nats) of the k samples' actions, counted as answers.

The samples' generator is seeded from ``(seed, episode_id, step)``, not from a shared stream, so a
decision's samples do not depend on batching or on what ran before. The greedy action is unchanged.
``sample_seconds`` / ``act_seconds`` / ``decisions`` add up what the samples cost.


Sampling (``temperature > 0``) draws per decision: a yes/no answer compares one uniform that is a
pure function of ``(seed, episode_id, step, mode)`` with P(yes); a generated answer samples each
token by the Gumbel-max trick (``argmax(logits / T + Gumbel noise)`` is a draw from
``softmax(logits / T)``) with noise from a generator seeded by ``(seed, episode_id, step, mode,
token position)``. So an answer depends on its decision only, not on the batch it shares, the
calls made before it, or which method of a sweep played first: common random numbers, every
method meets the same draws. Greedy results do not depend on batching (up to float rounding).
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from agile.agents.prompt_cache import (
    PromptKVCache,
    greedy_continue,
    kv_bytes_per_token,
    sample_continue,
    score_continuations,
)
from agile.envs.answer_eval import parse_product_ids
from agile.envs.phrasing import is_yes_no_question
from agile.envs.productqa_env import (
    PREDICT,
    SEARCH,
    SEARCH_RESULT_HEADER,
    SEEK,
    search_result_ids,
)
from agile.envs.scripted_answers import NO_PRODUCT, question_type
from agile.models import load_causal_lm
from agile.protocol import BASE, Action, Observation
from agile.seeding import derive_seed, stable_uniform

SHORT_SYSTEM_PROMPT = "You are a customer-service assistant of an online shop."
SYSTEM_PROMPT = (
    f"{SHORT_SYSTEM_PROMPT} Reply with one line that starts with a function token: "
    "[PredictAnswer] <answer> to answer the customer, [SearchProduct] <SQL> to search the "
    "product table, or [SeekAdvice] to ask a human expert."
)
"""The full instructions, for ``constrained=False``; constrained prompts give the function token
themselves and use the short system prompt (prompt length is most of the cost on a CPU)."""
INSTRUCTIONS = {
    "yesno": "Answer the customer's question with yes or no.",
    "free": "Answer the customer's question in a few words.",
    "sql": (
        "Write one SQLite query on the table above that selects the product_id of the products "
        "the customer wants. Example: [SearchProduct] SELECT product_id FROM `shoes` WHERE "
        "price < 50 AND brand = \"Nike\" ORDER BY price LIMIT 1;"
    ),
    "ids": "Answer with the product id from the search result, or none if no product matches.",
    "decide": ("Reply with [SearchProduct] <SQL> to search the table above for the products the "
               "customer wants, or with [PredictAnswer] <answer> to answer the customer."),
}
MODE_CHOICES = ("model", "question_type")
"""How ``LLMAgent`` picks a mode: by the model's log-probabilities (the default, annotation-free),
or from the dataset's question type (an ablation)."""
PREFIX_CACHE_BYTES = 768 * 2**20
"""Default memory for cached prompt keys and values on a CPU (a lockstep round of 16 search
prompts of SmolLM2 must fit: the answers after the search reuse them in the next round)."""
_AGENT_TOKEN = re.compile("|".join(re.escape(t) for t in (PREDICT, SEARCH, SEEK)))
_TABLE = re.compile(r"Table `([^`]+)`")
_CUSTOMER = re.compile(r"^Customer: (.*)$", re.MULTILINE)
SIGNAL_KEYS = ("answer_logprob", "margin", "entropy")
"""The signals an ``LLMAgent`` action carries (see the module docstring)."""
SAMPLE_SLACK = 8
"""Tokens a consistency sample may run beyond the greedy answer's length before it is cut."""
CONSISTENCY_KEYS = ("consistency_agree", "consistency_entropy")
"""The signals added by ``consistency_samples > 0`` (see the module docstring)."""


def answer_key(action_text: str) -> str:
    """What two sampled actions must share to count as the same answer: the first line, lowercased,
    spaces collapsed (the environment reads the first line only)."""
    return " ".join(action_text.split("\n", 1)[0].lower().split())


def consistency_signals(greedy: str, samples: Sequence[str]) -> dict[str, float]:
    """Agreement of ``samples`` with the ``greedy`` action and the entropy of their answers."""
    keys = [answer_key(s) for s in samples]
    counts = Counter(keys).values()
    n = len(keys)
    entropy = -sum(c / n * math.log(c / n) for c in counts)
    agree = sum(key == answer_key(greedy) for key in keys) / n
    return {"consistency_agree": float(agree), "consistency_entropy": float(entropy) + 0.0}


def answer_mode(observation: Observation, search: bool) -> str:
    """The mode once the search decision is taken: ``ids`` after a search, ``sql`` to search,
    else ``yesno`` or ``free`` by the question's phrasing (text a deployed agent sees)."""
    if SEARCH_RESULT_HEADER in observation.state_text:
        return "ids"
    if search:
        return "sql"
    match = _CUSTOMER.search(observation.state_text)
    question = match.group(1) if match else observation.state_text
    return "yesno" if is_yes_no_question(question) else "free"


def annotated_mode(observation: Observation) -> str:
    """The mode the dataset's question type implies (the ``mode_choice="question_type"`` ablation;
    tests use it to build observations of every mode). No agent reads it by default."""
    qtype = question_type(observation)
    if qtype == "search_qa":
        return answer_mode(observation, search=True)
    if qtype == "reasoning_qa":
        return "yesno"
    return answer_mode(observation, search=False)


choose_mode = annotated_mode
"""The earlier name of ``annotated_mode`` (an ``LLMAgent`` now chooses with ``LLMAgent.modes``)."""


def answer_without_model(observation: Observation, mode: str) -> str | None:
    """The action when no model call is needed, else None."""
    if mode == "ids" and not search_result_ids(observation.state_text):
        # The search found nothing (or failed): "none" is the only consistent answer.
        return f"{PREDICT} {NO_PRODUCT}"
    return None


def prompt_messages(observation: Observation, mode: str, constrained: bool = True) -> list[dict[str, str]]:
    """The system and user turns of the prompt (the reply then starts with ``reply_prefix``)."""
    user = f"{observation.state_text}\n\n{INSTRUCTIONS[mode]}"
    system = SHORT_SYSTEM_PROMPT if constrained else SYSTEM_PROMPT
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def reply_prefix(observation: Observation, mode: str, constrained: bool = True) -> str:
    """The forced start of the reply ("" when the model writes the function token itself)."""
    if mode == "decide" or (not constrained and mode != "yesno"):
        return ""
    if mode == "sql":
        match = _TABLE.search(observation.state_text)
        table = match.group(1) if match else "products"
        return f"{SEARCH} SELECT product_id FROM `{table}` WHERE"
    return PREDICT


def finish_action(observation: Observation, mode: str, output: str, constrained: bool = True) -> str:
    """Turn the model's continuation into an action text (with a fallback note if needed)."""
    line = output.strip().split("\n", 1)[0].strip()
    prefix = reply_prefix(observation, mode, constrained)
    if not prefix:  # unconstrained: the model had to write the function token itself
        match = _AGENT_TOKEN.search(line)
        if match is not None:
            return line[match.start():]
        return f"{PREDICT} {line or 'unknown'}\n# fallback: no function token in the model's output {line[:80]!r}"
    if mode == "sql":
        # Keep the query up to its first semicolon: small models keep talking after it.
        sql = line.split(";", 1)[0].strip()
        return f"{prefix} {sql};" if sql else f"{prefix};"
    if mode == "ids":
        found = search_result_ids(observation.state_text)
        named = parse_product_ids(line, found)
        if named:
            return f"{PREDICT} {', '.join(named)}"
        if re.match(r"^(none|no\b|nothing|sorry)", line, re.IGNORECASE) or not found:
            return f"{PREDICT} {NO_PRODUCT}"
        return (f"{PREDICT} {found[0]}\n# fallback: no product id in the model's answer "
                f"{line[:80]!r}; used the first search result")
    if not line:
        return f"{PREDICT} unknown\n# fallback: the model's answer was empty"
    return f"{PREDICT} {line}"


def first_token_signals(logits: torch.Tensor) -> tuple[float, float]:
    """(top-1 minus top-2 log-probability, entropy in nats) of one next-token distribution."""
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    top = log_probs.topk(2).values
    return float(top[0] - top[1]), float(torch.special.entr(log_probs.exp()).sum())


def generation_signals(first_logits: torch.Tensor, token_log_probs: Sequence[float]) -> dict[str, float]:
    """The signals of a generated answer: ``first_logits`` gave its first token, ``token_log_probs``
    are the chosen tokens' log-probabilities (cut by ``answer_length``)."""
    margin, entropy = first_token_signals(first_logits)
    return {"answer_logprob": float(sum(token_log_probs) / len(token_log_probs)), "margin": margin,
            "entropy": entropy}


def answer_length(tokens: Sequence[int], stops: set[int], eos: set[int]) -> int:
    """How many generated tokens make the answer: up to and including the first stop or end token
    (what the prompt cache path generates; batched ``generate`` runs rows on after theirs)."""
    for n, token in enumerate(tokens, start=1):
        if token in stops or token in eos:
            return n
    return len(tokens)


class LLMAgent:
    """A Hugging Face causal LM prompted with the state text; see the module docstring."""

    def __init__(
        self,
        model: str = "smollm2",
        device: str | None = None,
        max_new_tokens: int = 48,
        temperature: float = 0.0,
        seed: int = 0,
        constrained: bool = True,
        yes_bias: float = 0.0,
        max_batch: int = 32,
        cpu_padding: float = 0.1,
        actor: str = BASE,
        name: str | None = None,
        lm=None,
        cache_size: int = 50_000,
        prefix_cache_tokens: int | None = None,
        dtype: torch.dtype | str | None = None,
        signals: bool = True,
        consistency_samples: int = 0,
        consistency_temperature: float = 1.0,
        mode_choice: str = "model",
        search_bias: float = 0.0,
    ):
        """``lm``: an already loaded ``(model, tokenizer)`` pair to share (e.g. between tests).

        ``max_batch`` caps the prompts of one model call. ``cpu_padding``: on a CPU a padded
        token costs as much as a real one and a bigger batch is not faster per token (the matmuls
        are compute-bound), so prompts are grouped into batches whose padding stays under this
        share; on a GPU batches are filled up to ``max_batch``. ``cache_size``: greedy answers
        are remembered by prompt (evaluation replays the same questions under many gates and
        budgets, and a greedy answer is a function of its prompt); 0 turns the cache off.
        ``prefix_cache_tokens``: tokens of recent prompts whose keys and values are kept for
        reuse by greedy calls (``agile.agents.prompt_cache``); ``None``: what fits in
        ``PREFIX_CACHE_BYTES`` on a CPU (17,476 tokens of SmolLM2-135M in float32), 0 (off:
        batched ``generate``) on a GPU, where batching pays instead.
        ``dtype``: the weights' type (default: ``agile.models.default_dtype``). ``"bfloat16"`` on
        a CPU with native bfloat16 (AVX512-BF16, AMX) runs SmolLM2 about 3x faster than float32,
        but it is not the same model: some greedy answers change (see benchmarks/RESULTS.md).
        ``signals``: fill ``Action.signals`` (see the module docstring); False skips the
        log-probabilities of generated tokens (the actions are the same either way).
        ``consistency_samples``: k answers sampled at ``consistency_temperature`` beside each greedy
        one, read as ``consistency_*`` signals (0: off; see the module docstring).
        ``mode_choice``: ``model`` (the agent decides whether to search by its log-probabilities
        where the question is not a yes/no question)
        or ``question_type`` (reads the dataset's annotation: an ablation). ``search_bias``: added
        to the search-minus-answer log-probability margin of that decision.
        """
        if mode_choice not in MODE_CHOICES:
            raise ValueError(f"mode_choice must be one of {', '.join(MODE_CHOICES)}, got {mode_choice!r}.")
        if consistency_samples < 0:
            raise ValueError(f"consistency_samples must be >= 0 (0: off), got {consistency_samples}.")
        if consistency_samples and not consistency_temperature > 0:
            raise ValueError(f"consistency_temperature must be > 0, got {consistency_temperature}.")
        if consistency_samples and temperature > 0:
            raise ValueError("consistency_samples needs a greedy agent (temperature 0): the samples are "
                             "compared with its greedy answer.")
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        self.model, self.tokenizer = (
            lm if lm is not None else load_causal_lm(model, device=device, seed=seed, dtype=dtype)
        )
        if self.tokenizer.padding_side != "left":
            raise ValueError("LLMAgent needs a tokenizer with padding_side='left' (use agile.models.load_tokenizer).")
        self.max_new_tokens = max_new_tokens
        self.temperature = float(temperature)
        self.seed = seed
        self.constrained = constrained
        self.yes_bias = float(yes_bias)
        self.max_batch = max(1, int(max_batch))
        self.cpu_padding = float(cpu_padding)
        self.actor = actor
        self.signals = bool(signals)
        self.name = name or f"llm:{model}"
        self.calls = 0
        self._yes = self._first_ids(" yes", " Yes")
        self._no = self._first_ids(" no", " No")
        self._newlines: torch.Tensor | None = None
        self.cache_size = int(cache_size)
        self._cache: OrderedDict[str, tuple[str, dict[str, float]]] = OrderedDict()
        self.cache_hits = 0
        if prefix_cache_tokens is None:
            on_cpu = self.model.device.type == "cpu"
            prefix_cache_tokens = PREFIX_CACHE_BYTES // kv_bytes_per_token(self.model) if on_cpu else 0
        if consistency_samples and prefix_cache_tokens <= 0:
            # The samples continue the greedy answer's prefilled prompt: that path needs the cache.
            prefix_cache_tokens = PREFIX_CACHE_BYTES // kv_bytes_per_token(self.model)
        self.prefix_cache = PromptKVCache(self.model, prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self.mode_choice = mode_choice
        self.search_bias = float(search_bias)
        self._function_ids = [self.tokenizer.encode(t, add_special_tokens=False) for t in (SEARCH, PREDICT)]
        self._decisions: OrderedDict[str, float] = OrderedDict()
        self._decide_cache: PromptKVCache | None = None
        self._semicolons: set[int] | None = None
        self.consistency_samples = int(consistency_samples)
        self.consistency_temperature = float(consistency_temperature)
        self.decisions = 0
        """Observations answered by ``act`` (answer cache hits and model-free answers included)."""
        self.act_seconds = 0.0
        """Wall time spent in ``act``."""
        self.sample_seconds = 0.0
        """Of ``act_seconds``, the time spent on the consistency samples."""

    def _newline_ids(self) -> torch.Tensor:
        """Ids of the tokens that contain a newline (an action is one line), computed once."""
        if self._newlines is None:
            pieces = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            ids = [i for i, piece in enumerate(pieces) if "\n" in piece]
            self._newlines = torch.tensor(ids, dtype=torch.long, device=self.model.device)
        return self._newlines

    def _first_ids(self, *words: str) -> list[int]:
        return sorted({self.tokenizer.encode(w, add_special_tokens=False)[0] for w in words})

    # -- prompting --------------------------------------------------------------------------

    def prompt(self, observation: Observation, mode: str) -> str:
        """The full text fed to the model, ending with the forced start of the reply."""
        messages = prompt_messages(observation, mode, self.constrained)
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:  # a base model without a chat template: plain text turns
            text = f"{messages[0]['content']}\n\n{messages[1]['content']}\n\nReply: "
        return text + self.reply_prefix(observation, mode)

    def reply_prefix(self, observation: Observation, mode: str) -> str:
        return reply_prefix(observation, mode, self.constrained)

    # -- acting ------------------------------------------------------------------------------

    def search_margins(self, observations: Sequence[Observation]) -> list[float]:
        """log p([SearchProduct]) - log p([PredictAnswer]) after each observation's decision
        prompt (greedy and deterministic; remembered by prompt like the answers)."""
        if self._decide_cache is None:
            # The answer prompts' cache where there is one: they share the decision prompt's start.
            self._decide_cache = self.prefix_cache or PromptKVCache(self.model, 16_384)
        out = []
        for observation in observations:
            prompt = self.prompt(observation, "decide")
            if prompt not in self._decisions:
                ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
                logits, kv = self._decide_cache.prefill(ids)
                search, predict = score_continuations(self.model, logits, kv, self._function_ids)
                self._decisions[prompt] = search - predict
                while len(self._decisions) > max(self.cache_size, 1):
                    self._decisions.popitem(last=False)
            out.append(self._decisions[prompt])
        return out

    @torch.no_grad()
    def modes(self, observations: Sequence[Observation]) -> list[str]:
        """The answering mode of each observation (see the module docstring)."""
        if self.mode_choice == "question_type":
            return [annotated_mode(o) for o in observations]
        plain = [answer_mode(o, search=False) for o in observations]
        undecided = [o for o, mode in zip(observations, plain) if mode == "free"]
        margins = iter(self.search_margins(undecided))
        return [answer_mode(o, search=next(margins) + self.search_bias > 0) if mode == "free" else mode
                for o, mode in zip(observations, plain)]

    @torch.no_grad()
    def act(self, observations: Sequence[Observation]) -> list[Action]:
        started = time.perf_counter()
        actions = self._act(observations)
        self.decisions += len(observations)
        self.act_seconds += time.perf_counter() - started
        return actions

    def _cache_key(self, prompt: str, observation: Observation) -> str:
        """Answers are remembered by prompt; with samples also by decision, whose seed they follow."""
        if not self.consistency_samples:
            return prompt
        return f"{prompt}\x00{observation.episode_id}\x00{observation.step}"

    def _sample_generator(self, observation: Observation) -> torch.Generator:
        """The consistency samples' generator of one decision (see the module docstring)."""
        seed = derive_seed(self.seed, observation.episode_id, observation.step, "consistency")
        return torch.Generator().manual_seed(seed)

    def _act(self, observations: Sequence[Observation]) -> list[Action]:
        modes = self.modes(observations)
        texts: list[str | None] = [None] * len(observations)
        signals: list[dict[str, float]] = [{} for _ in observations]
        for i, mode in enumerate(modes):
            texts[i] = answer_without_model(observations[i], mode)
        prompts = {i: self.prompt(observations[i], mode) for i, mode in enumerate(modes) if texts[i] is None}
        use_cache = self.cache_size > 0 and self.temperature == 0
        if use_cache:
            for i in list(prompts):
                key = self._cache_key(prompts[i], observations[i])
                if key in self._cache:
                    texts[i], signals[i] = self._cache[key]
                    self._cache.move_to_end(key)
                    self.cache_hits += 1
                    del prompts[i]
        # Batches of similar length waste less compute on padding; which rows share a batch
        # does not change any row's result (greedy).
        by_length = sorted(prompts, key=lambda i: len(prompts[i]))
        yes_no = [i for i in by_length if modes[i] == "yesno"]
        generate = [i for i in by_length if modes[i] != "yesno"]
        self.calls += 1
        if self.prefix_cache is not None and self.temperature == 0:  # always taken with consistency samples
            self._act_with_prefix_cache(observations, modes, prompts, yes_no, generate, texts, signals)
            yes_no, generate = [], []
        keys = [(o.episode_id, o.step, mode) for o, mode in zip(observations, modes)]
        for chunk in self._batches(yes_no, prompts):
            for i, (answer, said) in zip(chunk, zip(*self._yes_no([prompts[i] for i in chunk],
                                                                   [keys[i] for i in chunk]))):
                texts[i], signals[i] = f"{PREDICT} {answer}", said
        for chunk in self._batches(generate, prompts):
            outputs = self._generate([prompts[i] for i in chunk], [modes[i] for i in chunk], [keys[i] for i in chunk])
            for i, (output, said) in zip(chunk, zip(*outputs)):
                texts[i], signals[i] = self.finish(observations[i], modes[i], output), said
        if use_cache:
            for i, prompt in prompts.items():
                self._cache[self._cache_key(prompt, observations[i])] = (texts[i], signals[i])
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return [Action(text, actor=self.actor, signals=dict(said)) for text, said in zip(texts, signals)]

    def _stops(self, mode: str) -> set[int]:
        """Token ids that end an answer in ``mode`` (a newline; for a query also a ``;``)."""
        newlines = set(self._newline_ids().tolist())
        return newlines | self._semicolon_ids() if mode == "sql" else newlines

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        return set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])

    def _act_with_prefix_cache(self, observations, modes, prompts, yes_no, generate, texts, signals) -> None:
        """Greedy answers through the prompt key/value cache (see the module docstring)."""
        if not yes_no and not generate:
            return
        cache = self.prefix_cache
        encoded = self.tokenizer([prompts[i] for i in yes_no + generate], add_special_tokens=False)["input_ids"]
        ids = dict(zip(yes_no + generate, encoded))
        if yes_no:
            logits = torch.stack([cache.prefill(ids[i])[0] for i in yes_no])
            for i, (answer, said) in zip(yes_no, zip(*self._yes_no_answers(logits))):
                texts[i], signals[i] = f"{PREDICT} {answer}", said
            if self.consistency_samples:
                started = time.perf_counter()
                for i, row in zip(yes_no, logits):
                    samples = [f"{PREDICT} {a}" for a in self._sample_yes_no(row, observations[i])]
                    signals[i] = {**signals[i], **consistency_signals(texts[i], samples)}
                self.sample_seconds += time.perf_counter() - started
        eos = self._eos_ids()
        for start in range(0, len(generate), self.max_batch):
            chunk = generate[start:start + self.max_batch]
            rows = [cache.prefill(ids[i]) for i in chunk]
            stops = [self._stops(modes[i]) for i in chunk]
            if self.signals:
                continuations, log_probs = greedy_continue(self.model, rows, stops, eos, self.max_new_tokens,
                                                           with_log_probs=True)
                for i, (first, _), chosen in zip(chunk, rows, log_probs):
                    signals[i] = generation_signals(first, chosen)
            else:
                continuations = greedy_continue(self.model, rows, stops, eos, self.max_new_tokens)
            outputs = self.tokenizer.batch_decode(continuations, skip_special_tokens=True)
            for i, output in zip(chunk, outputs):
                texts[i] = self.finish(observations[i], modes[i], output)
            if self.consistency_samples:
                started = time.perf_counter()
                for i, row, stop, greedy in zip(chunk, rows, stops, continuations):
                    # A sample still going well past the greedy answer's length is another answer whatever
                    # it ends with: cut there (most of a sample's cost is its tail on a small model).
                    longest = min(self.max_new_tokens, len(greedy) + SAMPLE_SLACK)
                    samples = sample_continue(self.model, row, self.consistency_samples, stop, eos, longest,
                                              self.consistency_temperature, self._sample_generator(observations[i]))
                    said = [self.finish(observations[i], modes[i], text)
                            for text in self.tokenizer.batch_decode(samples, skip_special_tokens=True)]
                    signals[i] = {**signals[i], **consistency_signals(texts[i], said)}
                self.sample_seconds += time.perf_counter() - started
            del rows

    def _sample_yes_no(self, logits: torch.Tensor, observation: Observation) -> list[str]:
        """k yes/no answers drawn from one question's yes-against-no distribution at the
        consistency temperature (``yes_bias`` included, as the greedy answer has it)."""
        log_probs = torch.log_softmax(logits.float().cpu(), dim=-1)
        margin = torch.logsumexp(log_probs[self._yes], -1) - torch.logsumexp(log_probs[self._no], -1)
        p_yes = torch.sigmoid((margin + self.yes_bias) / self.consistency_temperature)
        draws = torch.rand(self.consistency_samples, generator=self._sample_generator(observation))
        return ["yes" if bool(d < p_yes) else "no" for d in draws]

    def _semicolon_ids(self) -> set[int]:
        """Ids of the tokens that contain ``;`` (a query is cut at its first one by ``finish``)."""
        if self._semicolons is None:
            pieces = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._semicolons = {i for i, piece in enumerate(pieces) if ";" in piece}
        return self._semicolons

    def _batches(self, indices: list[int], prompts: dict[int, str]):
        """Split ``indices`` (sorted by prompt length) into the batches of one model call each."""
        on_cpu = self.model.device.type == "cpu"
        batch: list[int] = []
        shortest = 0
        for i in indices:
            length = len(prompts[i])  # characters: a cheap, monotone proxy for tokens
            if batch and (len(batch) >= self.max_batch or (on_cpu and length > shortest * (1 + self.cpu_padding))):
                yield batch
                batch = []
            if not batch:
                shortest = length
            batch.append(i)
        if batch:
            yield batch

    def finish(self, observation: Observation, mode: str, output: str) -> str:
        """Turn the model's continuation into an action text (with a fallback note if needed)."""
        return finish_action(observation, mode, output, self.constrained)

    def _encode(self, prompts: list[str]):
        batch = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return {k: v.to(self.model.device) for k, v in batch.items()}

    def _yes_no(self, prompts: list[str], keys: list[tuple] | None = None) -> tuple[list[str], list[dict[str, float]]]:
        batch = self._encode(prompts)
        mask = batch["attention_mask"]
        # Left padding: positions must count real tokens only, as generate() does.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        try:  # only the last position is needed; the full logits of a long batch are ~GBs
            output = self.model(**batch, position_ids=positions, logits_to_keep=1)
        except TypeError:  # a model class without logits_to_keep
            output = self.model(**batch, position_ids=positions)
        return self._yes_no_answers(output.logits[:, -1, :].float(), keys)

    def _yes_no_answers(self, logits: torch.Tensor,
                        keys: list[tuple] | None = None) -> tuple[list[str], list[dict[str, float]]]:
        """``yes``/``no`` per row of last-position logits (see ``yes_bias`` and sampling), and
        each answer's signals. ``keys``: each row's ``(episode_id, step, mode)``, needed to sample."""
        log_probs = torch.log_softmax(logits, dim=-1)
        yes = torch.logsumexp(log_probs[:, self._yes], dim=-1)
        no = torch.logsumexp(log_probs[:, self._no], dim=-1)
        margin = yes - no + self.yes_bias
        if self.temperature > 0:
            draws = torch.tensor([stable_uniform(self.seed, *key, "yesno") for key in keys], dtype=torch.float32)
            says_yes = draws < torch.sigmoid(margin.cpu() / self.temperature)
        else:
            says_yes = margin.cpu() > 0
        # The model's own confidence: yes against no renormalised, before yes_bias.
        p_yes = torch.sigmoid(yes - no)
        entropy = torch.special.entr(p_yes) + torch.special.entr(1 - p_yes)
        signals = [
            {"answer_logprob": float(y if flag else n), "margin": float(abs(y - n)), "entropy": float(h)}
            for flag, y, n, h in zip(says_yes.tolist(), yes.tolist(), no.tolist(), entropy.tolist())
        ]
        if not self.signals:
            signals = [{} for _ in signals]
        return ["yes" if flag else "no" for flag in says_yes.tolist()], signals

    def _generate(self, prompts: list[str], modes: list[str],
                  keys: list[tuple] | None = None) -> tuple[list[str], list[dict[str, float]]]:
        """The continuations of ``prompts`` and their signals (``modes`` sets where answers end;
        ``keys``, each row's ``(episode_id, step, mode)``, seed its draws when sampling)."""
        batch = self._encode(prompts)
        kwargs = {
            "max_new_tokens": self.max_new_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
            "stopping_criteria": StoppingCriteriaList([_StopAtNewline(self._newline_ids())]),
            # Sampling is greedy decoding on Gumbel-perturbed logits (module docstring), so the raw
            # logits behind the signals are the model's own either way.
            "do_sample": False, "temperature": None, "top_p": None, "top_k": None,
        }
        if self.temperature > 0:
            seeds = [derive_seed(self.seed, *key, "generate") for key in keys]
            kwargs["logits_processor"] = LogitsProcessorList(
                [_DecisionGumbel(seeds, self.temperature, batch["input_ids"].shape[1])])
        if not self.signals:
            out = self.model.generate(**batch, **kwargs)
            continuations = out[:, batch["input_ids"].shape[1]:]
            return self.tokenizer.batch_decode(continuations, skip_special_tokens=True), [{} for _ in prompts]
        # Raw logits (not the sampler's processed scores): the model's own probabilities.
        out = self.model.generate(**batch, **kwargs, output_logits=True, return_dict_in_generate=True)
        continuations = out.sequences[:, batch["input_ids"].shape[1]:]
        chosen = torch.stack([torch.log_softmax(step.float(), dim=-1).gather(1, continuations[:, j:j + 1])[:, 0]
                              for j, step in enumerate(out.logits)], dim=1).cpu()
        eos = self._eos_ids()
        signals = []
        for row, (tokens, mode) in enumerate(zip(continuations.tolist(), modes)):
            n = answer_length(tokens, self._stops(mode), eos)
            signals.append(generation_signals(out.logits[0][row], chosen[row, :n].tolist()))
        return self.tokenizer.batch_decode(continuations, skip_special_tokens=True), signals


class _DecisionGumbel(LogitsProcessor):
    """``logits / T + Gumbel noise``, the noise of row r at generated token t drawn from a generator
    seeded by ``(seeds[r], t)``: the argmax is a sample of ``softmax(logits / T)`` that depends on
    the row's decision only (not on the batch, its padding, or earlier calls)."""

    def __init__(self, seeds: list[int], temperature: float, prompt_width: int):
        self.seeds, self.temperature, self.prompt_width = seeds, temperature, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        position = input_ids.shape[1] - self.prompt_width  # tokens generated so far: padding-free
        uniform = torch.stack([
            torch.rand(scores.shape[1], generator=torch.Generator().manual_seed(derive_seed(seed, position)))
            for seed in self.seeds]).to(scores.device)
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-12, 1 - 1e-7)))
        return scores.float() / self.temperature + gumbel


class _StopAtNewline(StoppingCriteria):
    """Stops each row of a batch once it has produced a newline token (transformers' own
    ``stop_strings`` rebuilds tables over the whole vocabulary at every call: ~0.5 s)."""

    def __init__(self, newline_ids: torch.Tensor):
        self.newline_ids = newline_ids
        self.done: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        hit = torch.isin(input_ids[:, -1], self.newline_ids)
        self.done = hit if self.done is None else self.done | hit
        return self.done.clone()
