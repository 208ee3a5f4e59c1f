"""The one place that builds an environment's episodes, base agent and strong actor.

    setup = EnvSetup(EnvSpec(env="textworld", tw_games=4, tw_quest_lengths=(3,)), split="train")
    episodes = setup.episodes(range(16), seed=0)
    base, strong = setup.base_agent(), setup.strong_actor()     # strong None: the human

``EnvSpec`` holds every parameter that decides them, and every command that builds an environment
nests it as its field ``spec`` (``helper.data.collect.CollectConfig`` for collection, ``EnvConfig``
and its subclasses for online evaluation, ``helpgate pipeline``): one declaration, flattened on each
command line by ``tyro`` (``--env``, ``--agent``, ...), so collection and evaluation build the same
things the same way. A command's stored config keeps these fields flat (``helper.stored_config``).
What differs between the environments below is each one's kind (``helper.data.env_kinds``).

- ProductQA (``agile`` is another name for it): episodes of ``agile.executor.episode.AgileSource``, the
  AGILE executor on windows of ``questions_per_episode`` questions of a ProductQA group (data root default:
  the embedded generated catalog), memory carried over (``memory``: embeddings or lexical); the question
  type is a feature only with ``gold_features``. Base agent: the LLM policy (``agent``: a model name or
  folder, or an SFT / PPO output folder; ``decoding``: constrained by default, which needs no SFT) or
  ``SimulatorAgent`` (per-question-type accuracy, memory boost; no LLM loaded). Strong: the human
  (seeking advice), ``human-cli``, or a stronger model's policy. Horizon: questions per episode.
- TextWorld: episodes of ``agile.envs.textworld_env.TextWorldSource`` (games, quest lengths, rooms,
  objects); base agent ``TextWorldSimulatorAgent`` (expert move with probability ``tw_sim_p``)
  or ``TextWorldLLMAgent``; strong ``TextWorldLLMAgent`` with the actor ``strong``. Horizon: the
  longest episode a game of the split allows.
- ``openai:MODEL`` (base or strong): ``agile.agents.openai_agent.OpenAIAgent``, the observation's text
  (ProductQA: the executor's context) sent to the chat-completions endpoint ``base_url`` (e.g. ``helpgate serve``).
- Strong ``human`` is ``None`` everywhere: ``run_episodes`` then plays ``episode.expert_action()``;
  ``human-cli`` asks a person at the terminal (``agile.agents.human_agent.HumanCLIAgent``).
- Plug-ins (``helper.data.plugins``): ``env`` / ``agent`` / ``strong`` may name a ``module:factory`` or an
  installed ``helpgate.envs`` / ``helpgate.agents`` entry point. A plug-in env needs a plug-in base
  agent; its horizon is the longest horizon of its episodes.

``Environment`` (``EnvConfig``) is what online evaluation runs: the held-out episodes (the
``test`` split, with a seed different from the collection seed), rebuilt fresh for each run since
``run_episodes`` plays them in place, and the two actors, shared by every method of a sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import tyro

from agile.protocol import BASE, STRONG
from helper.data.env_kinds import ENV_KINDS, EnvKind, kind_of
from helper.data.plugins import (
    AGENT_GROUP,
    ENV_GROUP,
    PluginError,
    episode_horizon,
    is_plugin,
    make_agent,
    resolve,
)

ENVS = tuple(ENV_KINDS)
ENV_ALIASES = {"agile": "productqa"}
"""Other names of a built-in env: ``agile`` was the AGILE executor's ProductQA, now ProductQA's only loop."""
HUMAN_STRONG = ("human", "human-cli")
OPENAI_PREFIX = "openai:"
AGENT_DTYPES = ("auto", "float32", "bfloat16")
"""An actor named ``openai:MODEL`` is ``agile.agents.openai_agent.OpenAIAgent`` on that served model."""


@dataclass(frozen=True)
class EnvSpec:
    """Every parameter that decides an environment and its actors: nested in every command that
    builds one (collect, evaluate, sweep, pipeline), its fields flattened on their command lines
    (``--env``, ``--agent``, ``--data``, ...). Which episodes a command plays (split, groups, seeds)
    is the command's own choice, passed to ``EnvSetup``: the pipeline plays two splits."""

    env: str = "productqa"
    """Environment: productqa (sessions of questions run by the AGILE executor; agile is another name for it),
    textworld (needs the textworld extra), or a plug-in env (module:factory or a helpgate.envs entry point)."""
    agent: str = "simulator"
    """Base agent: simulator (known dynamics), a model for an LLM agent (smollm2: the embedded one, tiny, a
    Hugging Face id or a folder), openai:MODEL (served at --base-url),
    or a plug-in agent (module:factory or a helpgate.agents entry point)."""
    strong: str = "human"
    """Who acts on an intervention: human (the gold answer / expert move), human-cli (a person at the
    terminal), a model name for a stronger LLM, openai:MODEL (served at --base-url), or a plug-in agent."""
    base_url: str | None = None
    """Endpoint of openai:MODEL actors, e.g. http://127.0.0.1:8000/v1 (helpgate serve); key from $OPENAI_API_KEY
    (default: $OPENAI_BASE_URL, else api.openai.com)."""
    device: str | None = None
    """Torch device of the LLMs and models (default: cuda when available, else cpu)."""
    agent_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights of a local LLM base agent: auto (in the pipeline: bfloat16 on a GPU or a CPU with native BF16,
    AVX512-BF16 or AMX, else float32; in a single command the loader's default, float32 on any CPU), or named.
    bfloat16 on a CPU with native BF16 collects about 3x faster (benchmarks/RESULTS.md) but is not the same model:
    some answers change, so keep one dtype for collection and evaluation (the pipeline stores auto as what it
    resolved to, and refuses to resume a folder on a machine where auto means the other one)."""
    data: str | None = None
    """ProductQA root with train/ and test/ groups (default: the embedded generated catalog of seed 0; the
    public data: ../shared/productqa)."""
    questions_per_episode: int = 8
    """ProductQA: decision points (questions in a session) per episode."""
    sim_accuracy: tuple[float, ...] = (0.8, 0.4, 0.3)
    """ProductQA simulator: probability of a right answer per question type (fact_qa, search_qa, reasoning_qa)."""
    memory_boost: float = 0.0
    """ProductQA simulator: accuracy added per retrieved memory entry that came from an intervention."""
    gold_features: bool = False
    """ProductQA: give the helper and every baseline the dataset's question type as type_<name> features
    (an ablation: a deployed agent never has it; off, features are only what the agent itself sees)."""
    restate_question: bool = False
    """ProductQA: the executor states the question again right before the agent's choice
    (``ExecutorConfig.restate_question``)."""
    list_advice_with_gate: bool = False
    """ProductQA: the system text lists ``[SeekAdvice]`` though the collection decides the advice
    (``ExecutorConfig.list_advice_with_gate``)."""
    yes_no_threshold: float = 0.0
    """ProductQA, constrained: the agent answers "yes" above this log-odds of yes against no
    (``ExecutorConfig.yes_no_threshold``)."""
    max_new_tokens: int = 96
    """ProductQA LLM agent: longest turn it writes (as agile eval)."""
    decoding: Literal["free", "constrained"] = "constrained"
    """ProductQA LLM agent: constrained (function and answer form chosen by log-probability; no SFT needed) or
    free (the policy writes its turns token by token, as an SFT / PPO model is trained to)."""
    memory: Literal["embedding", "lexical"] = "embedding"
    """ProductQA: how the executor's memory retrieves: MiniLM sentence embeddings (AGILE's) or shared content
    words (no model, exact)."""
    tw_games: int = 48
    """TextWorld: games in the split (episode i plays game i mod tw_games)."""
    tw_quest_lengths: tuple[int, ...] = (3, 4, 5, 6, 7, 8)
    """TextWorld: quest lengths (winning moves) the games cycle through."""
    tw_rooms: int = 5
    """TextWorld: rooms per game."""
    tw_objects: int = 10
    """TextWorld: objects per game."""
    tw_sim_p: float = 0.25
    """TextWorld simulator: probability of playing the expert's move on purpose."""
    tw_quest_length_feature: bool = False
    """TextWorld: give the game's quest length as a feature (an ablation: a generator setting a deployed agent does
    not know; off, features are only what the agent sees)."""
    plugin_timeout_s: float = 300.0
    """Plug-ins: seconds one call of a plug-in episode (step, observe, ...) or agent (act on a batch) may take before
    the run is stopped, naming it."""
    plugin_max_steps: int | None = None
    """Plug-in env: decisions after which an episode that is not done stops the run, naming it (default: the
    episode's own horizon)."""
    consistency_samples: int = 0
    """ProductQA LLM base agent (constrained decoding): k turns sampled from the same log-probabilities beside
    each greedy one, sharing its prefill, read as the consistency_agree / consistency_entropy signals of the PRM
    and helper (0: off)."""

    def __post_init__(self):
        # One name per environment: an alias (also in an older stored config) is its env.
        if self.env in ENV_ALIASES:
            object.__setattr__(self, "env", ENV_ALIASES[self.env])

    def check(self) -> None:
        """Refuse values that cannot work, naming the field."""
        if self.consistency_samples < 0:
            raise ValueError(f"consistency_samples must be >= 0 (0: off), got {self.consistency_samples}.")
        if self.consistency_samples and ("consistency_samples" not in self.kind.fields or self.agent == "simulator"
                                         or self.plugin or is_plugin(self.agent, AGENT_GROUP)
                                         or self.agent.startswith(OPENAI_PREFIX) or self.decoding != "constrained"):
            raise ValueError(f"consistency_samples={self.consistency_samples}: it samples the local LLM base agent "
                             f"of env productqa under constrained decoding, and agent={self.agent!r} on "
                             f"env={self.env!r} with decoding={self.decoding!r} is none; leave it at 0.")
        for name in (self.agent, self.strong):
            if is_plugin(name, AGENT_GROUP):
                resolve(name, AGENT_GROUP)  # not importable: refused before any file is written
        if self.agent_dtype not in AGENT_DTYPES:
            raise ValueError(f"agent_dtype={self.agent_dtype!r}: choose one of {AGENT_DTYPES}.")
        if self.agent_dtype != "auto" and not self.local_llm:
            raise ValueError(f"agent_dtype={self.agent_dtype!r}: it sets a local LLM base agent's weights, and "
                             f"agent={self.agent!r} on env={self.env!r} is none; leave it at auto.")
        if self.plugin:
            resolve(self.env, ENV_GROUP)  # not importable or no such factory: refused before any file is written
            if self.agent == "simulator":
                raise PluginError(f"env={self.env!r} is a plug-in environment, which has no built-in simulator: "
                                  "name its base agent with --agent module:factory (or a helpgate.agents entry point).")
            return
        if self.env not in ENVS:
            raise ValueError(f"env={self.env!r}: choose one of {ENVS}, or name a plug-in env as module:factory "
                             f"or an installed {ENV_GROUP} entry point.")
        for field_name, name in (("agent", self.agent), ("strong", self.strong)):
            if name == OPENAI_PREFIX:
                raise ValueError(f"{field_name}={name!r}: name the served model, e.g. openai:smollm2.")
        if self.decoding not in ("free", "constrained"):
            raise ValueError(f"decoding={self.decoding!r}: choose free or constrained.")
        if self.memory not in ("embedding", "lexical"):
            raise ValueError(f"memory={self.memory!r}: choose embedding or lexical.")
        self.kind.check(self)

    @property
    def local_llm(self) -> bool:
        """Whether the base agent is an LLM whose weights load here (its dtype is ours to choose)."""
        return not (self.plugin or self.agent == "simulator"
                    or is_plugin(self.agent, AGENT_GROUP) or self.agent.startswith(OPENAI_PREFIX))

    def resolved_dtype(self) -> str:
        """``agent_dtype`` with ``auto`` replaced by what the pipeline runs on this machine's ``device``: bfloat16 on a
        GPU or on a CPU with native BF16, float32 on other CPUs. A run folder stores this, so a resume on another kind
        of machine cannot quietly swap the agent for another dtype of it."""
        if self.agent_dtype != "auto" or not self.local_llm:
            return self.agent_dtype
        from agile.models import default_dtype, native_bf16, pick_device

        device = pick_device(self.device)
        if device.type == "cpu" and native_bf16():
            return "bfloat16"
        return str(default_dtype(device)).removeprefix("torch.")

    def dtype(self) -> str | None:
        """The base agent's weight type for the model loader (None: its default for the device)."""
        return None if self.agent_dtype == "auto" else self.agent_dtype

    @property
    def plugin(self) -> bool:
        """Whether ``env`` names a plug-in environment rather than a built-in one."""
        return self.env not in ENVS and is_plugin(self.env, ENV_GROUP)

    @property
    def kind(self) -> EnvKind:
        """What ``env`` decides: its fields, checks, episodes, actors, horizon and defaults (``env_kinds``)."""
        return kind_of(self.env)


class EnvSetup:
    """Builds the episodes (any split, any seed, any indices) and the two actors of one ``EnvSpec``.

    ``split``: the default split; ``groups``: ProductQA groups of that split (folder names; None:
    every group); ``agent_seed`` / ``strong_seed``: the seeds of the two actors' draws."""

    def __init__(self, spec: EnvSpec, split: str = "train", groups=None, agent_seed: int = 0,
                 strong_seed: int = 0):
        spec.check()
        self.spec = spec
        self.split = split
        self.groups = tuple(groups) if groups else None
        self.agent_seed, self.strong_seed = int(agent_seed), int(strong_seed)
        self.kind = spec.kind
        self.root = self.kind.data_root(spec)
        self._sources: dict[str, object] = {}

    def source(self, split: str | None = None):
        """The episode source of ``split`` (default: the spec's), built once."""
        split = split or self.split
        if split not in self._sources:
            self._sources[split] = self.kind.source(self, split)
        return self._sources[split]

    def groups_of(self, split: str) -> list[str] | None:
        """The chosen groups, for the split they were chosen in (another split has its own groups)."""
        return list(self.groups) if self.groups and split == self.split else None

    def episodes(self, indices, seed: int, split: str | None = None) -> list:
        """Fresh episodes ``indices`` of ``split``; episode ``i`` depends only on ``(seed, i)``."""
        return self.kind.episodes(self.source(split), indices, seed, self.spec)

    @property
    def horizon(self) -> int:
        """The most decisions an episode can have (the budget of "always intervene")."""
        return self.kind.horizon(self)

    def base_agent(self):
        s = self.spec
        if is_plugin(s.agent, AGENT_GROUP):
            return make_agent(s.agent, timeout_s=s.plugin_timeout_s)
        if s.agent.startswith(OPENAI_PREFIX):
            return self._openai_agent(s.agent, BASE, self.agent_seed)
        return self.kind.base_agent(self)

    def strong_actor(self):
        """The actor of an intervention; ``None`` is the human (``episode.expert_action()``)."""
        s = self.spec
        if s.strong == "human":
            return None
        if s.strong == "human-cli":
            from agile.agents.human_agent import HumanCLIAgent

            return HumanCLIAgent()
        if is_plugin(s.strong, AGENT_GROUP):
            return make_agent(s.strong, actor=STRONG, timeout_s=s.plugin_timeout_s)
        if s.strong.startswith(OPENAI_PREFIX):
            return self._openai_agent(s.strong, STRONG, self.strong_seed)
        return self.kind.strong_actor(self)

    def local_policy(self) -> bool:
        """Whether the base agent is a local LLM policy (ProductQA's: the executor's, which it reflects with)."""
        s = self.spec
        return not (s.agent == "simulator" or is_plugin(s.agent, AGENT_GROUP) or s.agent.startswith(OPENAI_PREFIX))

    def _openai_agent(self, name: str, actor: str, seed: int):
        """``openai:MODEL``: ``OpenAIAgent`` on the model served at ``base_url`` (its prompt: the observation's
        context, e.g. the executor's)."""
        from agile.agents.openai_agent import OpenAIAgent

        model = name[len(OPENAI_PREFIX):]
        prefix = "" if actor == BASE else f"{actor}:"
        return OpenAIAgent(model, base_url=self.spec.base_url, seed=seed, actor=actor, name=f"{prefix}{name}")


ENV_FIELD = Annotated[EnvSpec, tyro.conf.arg(name="")]
"""A command's nested ``EnvSpec``: its fields are the command's own flags (``--env``, not ``--spec.env``)."""


@dataclass
class EnvConfig:
    """The held-out episodes of online evaluation and the environment they come from."""

    spec: ENV_FIELD = field(default_factory=EnvSpec)
    """The environment and its actors (``EnvSpec``; its fields are flags of their own: --env, --agent, ...)."""
    split: Literal["train", "test"] = "test"
    """Split the evaluation episodes are drawn from (held-out groups or games)."""
    episodes: int = 64
    """Evaluation episodes per (method, budget)."""
    seed: int = 1000
    """Seed of the evaluation episodes (keep it different from the collection seed)."""
    agent_seed: int = 0
    """Seed of the base agent's draws."""


class Environment:
    """The held-out episodes, built fresh on demand, and the two actors of an ``EnvConfig``."""

    def __init__(self, cfg: EnvConfig):
        self.cfg = cfg
        self.setup = EnvSetup(cfg.spec, cfg.split, agent_seed=cfg.agent_seed)
        self.root = self.setup.root
        self.source = self.setup.source()
        self.base = self.setup.base_agent()
        self.strong = self.setup.strong_actor()
        self._horizon: int | None = None

    @property
    def horizon(self) -> int:
        if self._horizon is None:
            # A plug-in env declares no horizon of its own: the longest of the evaluation episodes.
            plugin = self.setup.spec.plugin
            self._horizon = max(map(episode_horizon, self.episodes())) if plugin else self.setup.horizon
        return self._horizon

    def episodes(self, n: int | None = None, seed: int | None = None, start: int = 0, split: str | None = None):
        """Fresh episodes ``start .. start+n-1`` (defaults: the evaluation set)."""
        n = self.cfg.episodes if n is None else n
        seed = self.cfg.seed if seed is None else seed
        return self.setup.episodes(range(start, start + n), seed, split)

    def type_sequences(self, split: str | None = None) -> list[tuple[list[str], float]]:
        """ProductQA: every session the split can produce, as (question types, probability).

        Episode ``i`` uses group ``i mod G`` (round-robin) and a start offset drawn uniformly, so
        each group has probability 1/G and each offset 1/(L - n + 1) within it.
        """
        if not self.cfg.spec.kind.question_sessions:
            raise ValueError(f"type_sequences needs a ProductQA env (question types), got env={self.cfg.spec.env!r}.")
        source = self.setup.source(split)
        sessions = []
        names = source.group_names
        for name in names:
            questions = source.group(name).questions
            n = min(self.cfg.spec.questions_per_episode, len(questions))
            offsets = len(questions) - n + 1
            for start in range(offsets):
                sessions.append(([q.type for q in questions[start:start + n]], 1.0 / (len(names) * offsets)))
        return sessions
