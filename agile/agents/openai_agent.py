"""A ProductQA / TextWorld agent behind any OpenAI-compatible chat-completions endpoint.

    agent = OpenAIAgent("smollm2", base_url="http://127.0.0.1:8000/v1")   # helpgate serve
    agent = OpenAIAgent("gpt-4o-mini", prefill=False)                      # api.openai.com
    actions = agent.act(observations)

It asks what ``agile.agents.llm_agent.LLMAgent`` asks (the same prompts, modes and parsing, imported
from there), one request per observation (two where it must first decide to search), ``concurrency``
requests in flight at a time. Like the local agent it never reads the dataset's question type: a
question phrased as yes/no is answered yes or no, one after a search with product ids, and any other
question is searched or answered as the model itself prefers:

- with prefill, one request after the local agent's decision prompt with the reply started by ``[``
  asks for one token's ``top_logprobs``; the mass of tokens that begin ``SearchProduct]`` against those
  that begin ``PredictAnswer]`` (plus ``search_bias``) decides. This is the local agent's margin cut at
  the first token where the two function tokens differ (``Search`` / ``Predict`` on SmolLM2, whose
  later tokens are near certain); when neither is among the top tokens, the generated token decides;
- without prefill the model answers the decision prompt itself: its line is the action.

- ``prefill=True`` (servers that continue a last assistant message: ``helpgate serve``, vLLM):
  the reply starts with the same forced prefix as the local agent (a function token, or the
  start of the SQL query), sent as a last ``assistant`` message with
  ``continue_final_message``. ``yesno`` questions ask for one token with ``top_logprobs`` and
  compare the mass of " yes"/" Yes" against " no"/" No" among them (plus ``yes_bias``), as the
  local agent does over the whole vocabulary: with the four tokens among the top ones the answer
  is the local agent's on the same model. When only one side is there it wins; when neither is,
  the generated token decides (yes if it reads "yes", else no).
- ``prefill=False`` (endpoints that do not continue a message, e.g. api.openai.com): the
  unconstrained prompt of ``LLMAgent(constrained=False)``: the model writes the whole line and a
  line without a function token falls back to ``[PredictAnswer] <line>``; ``yesno`` reads the
  first word of the reply.

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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

from agile.agents.llm_agent import answer_mode, answer_without_model, finish_action, prompt_messages, reply_prefix
from agile.agents.textworld_agents import prompt_messages as textworld_messages
from agile.envs.productqa_env import PREDICT, SEARCH
from agile.envs.textworld_env import admissible_commands
from agile.protocol import BASE, Action, Observation
from agile.seeding import derive_seed

TEXTWORLD, COMMAND = "textworld", "command"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
YES, NO = (" yes", " Yes"), (" no", " No")
"""The tokens whose mass a yes/no answer compares, as the local agent's (after the function token)."""
DECIDE = "decide"
_FUNCTION_START = "["
_SEARCH_REST, _PREDICT_REST = SEARCH[1:], PREDICT[1:]
"""What follows ``[`` in each function token: a top token that begins one of them votes for it."""


def is_local(base_url: str | None) -> bool:
    return bool(base_url) and urlparse(base_url).hostname in LOCAL_HOSTS


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
        modes = [COMMAND if o.env == TEXTWORLD else plain_mode(o) for o in observations]
        jobs = [(o, m) for o, m in zip(observations, modes)]
        if len(jobs) <= 1 or self.concurrency == 1:
            texts = [self._answer(o, m) for o, m in jobs]
        else:
            with ThreadPoolExecutor(min(self.concurrency, len(jobs))) as pool:
                texts = list(pool.map(lambda job: self._answer(*job), jobs))
        return [Action(text, actor=self.actor) for text in texts]

    # -- one observation -----------------------------------------------------------------------
    def _answer(self, observation: Observation, mode: str) -> str:
        if mode == COMMAND:
            reply = self._create(textworld_messages(observation), "", observation, max_tokens=self.max_tokens)
            command = (reply.choices[0].message.content or "").strip().split("\n", 1)[0].strip()
            if command:
                return command
            first = admissible_commands(observation.state_text)[:1] or ["look"]
            return f"{first[0]}\n# fallback: the model's reply was empty; played the first admissible command"
        if mode == DECIDE:
            if not self.prefill:  # the model writes the function token and its argument itself
                messages = prompt_messages(observation, DECIDE, constrained=False)
                reply = self._create(messages, "", observation, max_tokens=self.max_tokens)
                return finish_action(observation, DECIDE, reply.choices[0].message.content or "", constrained=False)
            mode = answer_mode(observation, search=self.search_margin(observation) + self.search_bias > 0)
        fixed = answer_without_model(observation, mode)
        if fixed is not None:
            return fixed
        constrained = self.prefill
        messages = prompt_messages(observation, mode, constrained)
        prefix = reply_prefix(observation, mode, constrained) if self.prefill else ""
        if prefix:
            messages.append({"role": "assistant", "content": prefix})
        if mode == "yesno":
            return f"{PREDICT} {self._yes_no(observation, messages, prefix)}"
        reply = self._create(messages, prefix, observation, max_tokens=self.max_tokens)
        return finish_action(observation, mode, reply.choices[0].message.content or "", constrained)

    def _yes_no(self, observation: Observation, messages: list[dict], prefix: str) -> str:
        if not prefix:  # no prefill: the model answers in words
            reply = self._create(messages, prefix, observation, max_tokens=4)
            word = (reply.choices[0].message.content or "").strip().lstrip("[").split(" ")[0].strip(".,!").lower()
            return "yes" if word == "yes" else "no"
        # No stop sequence: a newline as the likeliest token must still bring its log-probabilities.
        reply = self._create(messages, prefix, observation, max_tokens=1, logprobs=True, top_logprobs=self.top_logprobs,
                             temperature=0.0, stop=None)
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
        """Search-minus-answer log-probability at the first token the two function tokens differ
        (module docstring); +-inf when only one side is among the top tokens."""
        messages = prompt_messages(observation, DECIDE, constrained=True)
        messages.append({"role": "assistant", "content": _FUNCTION_START})
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


def _message(error) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(error)


def plain_mode(observation: Observation) -> str:
    """The mode the observation's text settles (``ids``, ``yesno``), else ``decide``: the model chooses."""
    mode = answer_mode(observation, search=False)
    return DECIDE if mode == "free" else mode


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
