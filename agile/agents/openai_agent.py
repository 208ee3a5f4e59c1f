"""A ProductQA / TextWorld agent behind any OpenAI-compatible chat-completions endpoint.

    agent = OpenAIAgent("smollm2", base_url="http://127.0.0.1:8000/v1")   # helpgate serve
    agent = OpenAIAgent("gpt-4o-mini", prefill=False)                      # api.openai.com
    actions = agent.act(observations)

ProductQA observations (``env == "productqa"``, the AGILE executor's: ``agile.executor.episode``)
are answered with one turn of the executor, one line: ``[SearchProduct] SELECT product_id FROM
`<table>` WHERE ...;`` or ``[PredictAnswer] <answer>``. The prompt is the executor's context
(``state_text``: its system text with the functions and the table's schema, the question, the
product, the retrieved memory, and any ``[SearchResult]`` / ``[Error]`` line of this decision) as
the one user message. One request per observation (two where the model must first decide to
search), ``concurrency`` requests in flight at a time. The dataset's question type
(``annotations``) is never read; the question is the text after the last ``[GetQuestion]``:

- **A question phrased as yes/no** (``agile.envs.phrasing.is_yes_no_question``) is answered
  ``[PredictAnswer] yes`` or ``no``, never searched (a search answers with product ids), as the
  local constrained policy does (``agile.executor.constrained``). With prefill, the reply is
  started with ``[PredictAnswer]`` and one token's ``top_logprobs`` compare the mass of
  " yes"/" Yes" against " no"/" No" (plus ``yes_bias``); when only one side is among the top
  tokens it wins, when neither is the generated token decides (yes if it reads "yes"). Without
  prefill, the first word of the model's answer.
- **Any other question**, with prefill: one request with the reply started by ``[`` asks for one
  token's ``top_logprobs``; the mass of tokens that begin ``SearchProduct]`` against those that
  begin ``PredictAnswer]`` (plus ``search_bias``) decides (``function_margin``: the first token
  where the two function tokens differ; when neither is among the top tokens, the generated token
  decides). To search, the reply is started ``[SearchProduct] SELECT product_id FROM `<table>`
  WHERE`` (the table the context's system text names) and the model completes the query (cut at
  its first ``;``); to answer, it is started ``[PredictAnswer]`` and the model completes the line.
  A context that offers no search (no table) is answered.
- Without prefill (endpoints that do not continue a message, e.g. api.openai.com) the model writes
  the whole line; the line from its first function token is the turn, and a line without one
  becomes ``[PredictAnswer] <line>``.
- **A retry**: the executor shows a rejected turn (a query that failed, an unknown function) as a
  ``[SearchResult]`` / ``[Error]`` line after the question and asks again, up to its
  ``max_turns``. Then the turn is an answer (the ``[PredictAnswer]`` continuation; without prefill
  the model's line made an answer), so that the retries end in an answer rather than in the same
  failing search.

Prefill (``prefill=True``: servers that continue a last assistant message, ``helpgate serve``,
vLLM) sends the start of the reply as a last ``assistant`` message with ``continue_final_message``.

TextWorld observations (``env == "textworld"``) get the prompt of
``agile.agents.textworld_agents.TextWorldLLMAgent`` and the model *writes* the command (one line); the
environment maps a command that is not admissible to the most similar admissible one, or wastes
the move (``agile.envs.textworld_env``). The local agent ranks the admissible commands by likelihood
instead, which chat completions cannot do, so the two play differently on the same model.

Sampling (``temperature > 0``) draws per decision: each request's ``seed`` and a yes/no answer's
uniform are pure functions of ``(seed, episode_id, step)``, so every method of a sweep meets the
same draws (as far as the server honours seeds; ``helpgate serve`` does).

Time-outs and retries are the ``openai`` client's (``timeout`` seconds per request,
``max_retries`` retries with exponential back-off on connection errors, 408/409/429/5xx). A
server that stays unreachable raises ``ConnectionError`` naming the base URL. The API key is
``api_key``, else ``$OPENAI_API_KEY``, else (for a server on this machine only) a placeholder.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

from agile.agents.textworld_agents import prompt_messages as textworld_messages
from agile.envs.phrasing import is_yes_no_question
from agile.envs.textworld_env import admissible_commands
from agile import functions as fn
from agile.protocol import BASE, Action, Observation
from agile.seeding import derive_seed

TEXTWORLD = "textworld"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
YES, NO = (" yes", " Yes"), (" no", " No")
"""The tokens whose mass a yes/no answer compares (after the prefilled ``[PredictAnswer]``)."""
PREDICT, SEARCH = fn.PREDICT_ANSWER, fn.SEARCH_PRODUCT
_FUNCTION_START = "["
_SEARCH_REST, _PREDICT_REST = SEARCH[1:], PREDICT[1:]
"""What follows ``[`` in each function token: a top token that begins one of them votes for it."""
_TABLE = re.compile(re.escape(SEARCH) + r" SELECT product_id FROM `([^`]+)`")
_FUNCTION = re.compile("|".join(re.escape(name) for name in fn.LLM_FUNCTIONS))
_REJECTED = (fn.SEARCH_RESULT, fn.ERROR)


def is_local(base_url: str | None) -> bool:
    return bool(base_url) and urlparse(base_url).hostname in LOCAL_HOSTS


def question_of(state_text: str) -> str:
    """The current question: the text after the last ``[GetQuestion]``, on that line."""
    return fn.current_question(state_text)


def table_of(state_text: str) -> str | None:
    """The table a search may query, as the context's system text offers it; None: no search offered."""
    match = _TABLE.search(state_text)
    return match.group(1) if match else None


def is_retry(state_text: str) -> bool:
    """Whether the context shows a rejected turn of the current question (a failed query's
    ``[SearchResult]`` or an ``[Error]``): the executor is asking again."""
    current = state_text.rsplit(fn.GET_QUESTION, 1)[-1]
    return any(marker in current for marker in _REJECTED)


def search_prefix(table: str) -> str:
    return f"{SEARCH} SELECT product_id FROM `{table}` WHERE"


class OpenAIAgent:
    """See the module docstring."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
        max_tokens: int = 48,
        temperature: float = 0.0,
        seed: int = 0,
        prefill: bool = True,
        yes_bias: float = 0.0,
        search_bias: float = 0.0,
        top_logprobs: int = 20,
        actor: str = BASE,
        name: str | None = None,
    ):
        try:
            import openai
        except ImportError as error:
            raise ImportError("openai:MODEL agents need the openai package: pip install 'helpgate[serve]'") from error
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if not is_local(base_url):
                raise ValueError(f"openai:{model}: no API key. Set OPENAI_API_KEY (or pass --base-url of a "
                                 "server on this machine, which needs none).")
            api_key = "local"  # servers on this machine ignore it; the client insists on one
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}.")
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self.base_url = str(self.client.base_url)
        self.model = model
        self.max_retries = max_retries
        self.concurrency = int(concurrency)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.seed = seed
        self.prefill = prefill
        self.yes_bias = float(yes_bias)
        self.search_bias = float(search_bias)
        self.top_logprobs = int(top_logprobs)
        self.actor = actor
        self.name = name or f"openai:{model}"

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        if len(observations) <= 1 or self.concurrency == 1:
            texts = [self._answer(o) for o in observations]
        else:
            with ThreadPoolExecutor(min(self.concurrency, len(observations))) as pool:
                texts = list(pool.map(self._answer, observations))
        return [Action(text, actor=self.actor) for text in texts]

    # -- one observation -----------------------------------------------------------------------
    def _answer(self, observation: Observation) -> str:
        if observation.env == TEXTWORLD:
            return self._command(observation)
        messages = [{"role": "user", "content": observation.state_text}]
        if is_yes_no_question(question_of(observation.state_text)):
            return f"{PREDICT} {self._yes_no(observation, messages)}"
        retry = is_retry(observation.state_text)
        if not self.prefill:  # the model writes the function token and its argument itself
            reply = self._create(messages, "", observation, max_tokens=self.max_tokens)
            return written_turn(reply.choices[0].message.content or "", answer=retry)
        table = table_of(observation.state_text)
        if table is not None and not retry and self.search_margin(observation) + self.search_bias > 0:
            prefix = search_prefix(table)
            reply = self._create(messages + [{"role": "assistant", "content": prefix}], prefix, observation,
                                 max_tokens=self.max_tokens)
            # Keep the query up to its first semicolon: small models keep writing after it.
            sql = _first_line(reply.choices[0].message.content).split(";", 1)[0].strip()
            return f"{prefix} {sql};" if sql else f"{prefix};"
        reply = self._create(messages + [{"role": "assistant", "content": PREDICT}], PREDICT, observation,
                             max_tokens=self.max_tokens)
        return f"{PREDICT} {_first_line(reply.choices[0].message.content)}".rstrip()

    def _command(self, observation: Observation) -> str:
        reply = self._create(textworld_messages(observation), "", observation, max_tokens=self.max_tokens)
        command = _first_line(reply.choices[0].message.content)
        if command:
            return command
        first = admissible_commands(observation.state_text)[:1] or ["look"]
        return f"{first[0]}\n# fallback: the model's reply was empty; played the first admissible command"

    def _yes_no(self, observation: Observation, messages: list[dict]) -> str:
        if not self.prefill:  # the model answers in words: the first word of its answer decides
            reply = self._create(messages, "", observation, max_tokens=8)
            line = _first_line(reply.choices[0].message.content)
            call = fn.parse_call(line)
            words = (call.argument if call is not None else line).split()
            return "yes" if words and words[0].strip(".,!").lower() == "yes" else "no"
        messages = messages + [{"role": "assistant", "content": PREDICT}]
        # No stop sequence: a newline as the likeliest token must still bring its log-probabilities.
        reply = self._create(messages, PREDICT, observation, max_tokens=1, logprobs=True,
                             top_logprobs=self.top_logprobs, temperature=0.0, stop=None)
        choice = reply.choices[0]
        tops = choice.logprobs.content[0].top_logprobs if choice.logprobs and choice.logprobs.content else []
        yes = [t.logprob for t in tops if t.token in YES]
        no = [t.logprob for t in tops if t.token in NO]
        if not yes and not no:
            return "yes" if (choice.message.content or "").strip().lower() == "yes" else "no"
        margin = _logsumexp(yes) - _logsumexp(no) + self.yes_bias
        if self.temperature > 0:
            u = random.Random(derive_seed(self.seed, observation.episode_id, observation.step, "yesno")).random()
            return "yes" if u < 1.0 / (1.0 + math.exp(-max(min(margin / self.temperature, 700), -700))) else "no"
        return "yes" if margin > 0 else "no"

    def search_margin(self, observation: Observation) -> float:
        """Search-minus-answer log-probability at the first token the two function tokens differ,
        after the context and a reply started by ``[`` (module docstring); +-inf when only one side
        is among the top tokens, or when neither is (then the generated token decides)."""
        messages = [{"role": "user", "content": observation.state_text},
                    {"role": "assistant", "content": _FUNCTION_START}]
        reply = self._create(messages, _FUNCTION_START, observation, max_tokens=1, logprobs=True,
                             top_logprobs=self.top_logprobs, temperature=0.0, stop=None)
        choice = reply.choices[0]
        tops = choice.logprobs.content[0].top_logprobs if choice.logprobs and choice.logprobs.content else []
        margin = function_margin([(t.token, t.logprob) for t in tops])
        if margin is None:  # neither among the top tokens: the generated one decides
            token = (choice.message.content or "").strip()
            return math.inf if token and _SEARCH_REST.startswith(token) else -math.inf
        return margin

    def _create(self, messages: list[dict], prefix: str, observation: Observation, **kwargs):
        import openai

        kwargs.setdefault("temperature", self.temperature)
        if kwargs.setdefault("stop", ["\n"]) is None:  # an action is one line, unless told otherwise
            del kwargs["stop"]
        if kwargs["temperature"] > 0:
            # One seed per decision (common random numbers across methods); 31 bits, what servers take.
            kwargs["seed"] = derive_seed(self.seed, observation.episode_id, observation.step, "generate") % 2**31
        extra = {"continue_final_message": True, "add_generation_prompt": False} if prefix else None
        try:
            return self.client.chat.completions.create(model=self.model, messages=messages, extra_body=extra,
                                                       **kwargs)
        except openai.APIConnectionError as error:  # timeouts included
            raise ConnectionError(
                f"{self.name}: the server at {self.base_url} did not answer ({error}) after "
                f"{self.max_retries} retries. Start it (e.g. helpgate serve --model NAME --port P) or fix "
                f"--base-url.") from error
        except openai.APIStatusError as error:
            raise RuntimeError(f"{self.name}: the server at {self.base_url} refused the request: HTTP "
                               f"{error.status_code} {_message(error)}") from error


def written_turn(output: str, answer: bool = False) -> str:
    """A turn the model wrote whole (no prefill): the line from its first function token; a line
    without one is the answer. ``answer``: make any turn an answer (a retry must end)."""
    line = _first_line(output)
    match = _FUNCTION.search(line)
    if match is None:
        return f"{PREDICT} {line}".rstrip()
    turn = line[match.start():]
    call = fn.parse_call(turn)
    if answer and (call is None or call.name != PREDICT):
        return f"{PREDICT} {call.argument if call is not None else line}".rstrip()
    return turn


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n", 1)[0].strip()


def _message(error) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(error)


def function_margin(top_logprobs: Sequence[tuple[str, float]]) -> float | None:
    """log-mass of the top tokens that begin ``SearchProduct]`` minus those that begin
    ``PredictAnswer]``; None when neither side has one (+-inf when only one has)."""
    search = [lp for token, lp in top_logprobs if token and _SEARCH_REST.startswith(token)]
    predict = [lp for token, lp in top_logprobs if token and _PREDICT_REST.startswith(token)]
    if not search and not predict:
        return None
    return _logsumexp(search) - _logsumexp(predict)


def _logsumexp(values: list[float]) -> float:
    if not values:
        return -math.inf
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))
