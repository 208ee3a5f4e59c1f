"""The one place that builds an environment's episodes, base agent and strong actor.

    setup = EnvSetup(EnvSpec(env="textworld", split="train", tw_games=4, tw_quest_lengths=(3,)))
    episodes = setup.episodes(range(16), seed=0)
    base, strong = setup.base_agent(), setup.strong_actor()     # strong None: the human

``EnvSpec`` holds every parameter that decides them; ``env_spec(config)`` reads it off a command's
config (``helper.data.collect.CollectConfig`` for collection, ``EnvConfig`` and its subclasses for
online evaluation), so collection and evaluation build the same things the same way.

- ProductQA: episodes of ``agile.envs.productqa_env.ProductQASource`` (data root, split, groups,
  questions per episode; the question type as a feature only with ``gold_features``); base agent ``SimulatorAgent`` (per-question-type accuracy, memory boost)
  or ``LLMAgent``; strong ``StrongLLMAgent``. Horizon: questions per episode.
- AGILE: episodes of ``agile.executor.episode.AgileSource``: the AGILE executor and LLM policy
  (``agent``: an SFT / PPO output folder, default the embedded SmolLM2) on windows of
  ``questions_per_episode`` questions of a ProductQA group (data root default: ``../shared/productqa``
  or ``$HELPGATE_PRODUCTQA``), memory carried over; the strong actor is the human (seeking advice).
- TextWorld: episodes of ``agile.envs.textworld_env.TextWorldSource`` (games, quest lengths, rooms,
  objects); base agent ``TextWorldSimulatorAgent`` (expert move with probability ``tw_sim_p``)
  or ``TextWorldLLMAgent``; strong ``TextWorldLLMAgent`` with the actor ``strong``. Horizon: the
  longest episode a game of the split allows.
- ``openai:MODEL`` (base or strong): ``agile.agents.openai_agent.OpenAIAgent``, the LLM agents'
  prompts sent to the chat-completions endpoint ``base_url`` (e.g. ``helpgate serve``).
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

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from agile.envs.productqa import QUESTION_TYPES
from agile.protocol import BASE, STRONG
from helper.data.plugins import (
    AGENT_GROUP,
    ENV_GROUP,
    PluginError,
    PluginSource,
    episode_horizon,
    is_plugin,
    make_agent,
    resolve,
)

ENVS = ("productqa", "textworld", "agile")
HUMAN_STRONG = ("human", "human-cli")
OPENAI_PREFIX = "openai:"
AGENT_DTYPES = ("auto", "float32", "bfloat16")
"""An actor named ``openai:MODEL`` is ``agile.agents.openai_agent.OpenAIAgent`` on that served model."""


@dataclass(frozen=True)
class EnvSpec:
    """Every parameter that decides an environment's episodes and actors."""

    env: str = "productqa"
    """productqa, textworld, agile (the AGILE executor and policy), or a plug-in env (module:factory or a helpgate.envs entry point)."""
    split: str = "train"
    """Split the episodes come from (train or test)."""
    agent: str = "simulator"
    """simulator, the model name of an LLM base agent, openai:MODEL (a chat-completions endpoint), or a plug-in agent (module:factory or entry point)."""
    strong: str = "human"
    """human (the episode's expert action), human-cli (a person at the terminal), the model name of a
    strong LLM, openai:MODEL, or a plug-in agent."""
    base_url: str | None = None
    """Endpoint of openai:MODEL actors (default: $OPENAI_BASE_URL, else api.openai.com)."""
    agent_seed: int = 0
    """Seed of the base agent's draws."""
    strong_seed: int = 0
    """Seed of the strong LLM's draws."""
    device: str | None = None
    """Torch device of the LLMs (default: cuda when available, else cpu)."""
    agent_dtype: str = "auto"
    """Weights of a local LLM base agent: auto (bfloat16 on a GPU, float32 on a CPU), float32 or bfloat16."""
    data: str | None = None
    """ProductQA root (default: the embedded generated catalog of seed 0)."""
    groups: tuple[str, ...] | None = None
    """ProductQA groups (folder names); default: every group of the split."""
    questions_per_episode: int = 8
    """ProductQA: decision points per episode."""
    sim_accuracy: tuple[float, ...] = (0.8, 0.4, 0.3)
    """ProductQA simulator: accuracy per question type (fact_qa, search_qa, reasoning_qa)."""
    memory_boost: float = 0.0
    """ProductQA simulator: accuracy added per retrieved memory entry from an intervention."""
    gold_features: bool = False
    """ProductQA: add the dataset's question type to the observation's features (an ablation)."""
    max_new_tokens: int = 96
    """AGILE: longest turn the agent writes (as agile eval)."""
    decoding: str = "free"
    """AGILE: free (the policy writes its turns) or constrained (function and answer form by log-probability; no SFT needed)."""
    tw_games: int = 48
    """TextWorld: games in the split."""
    tw_quest_lengths: tuple[int, ...] = (3, 4, 5, 6, 7, 8)
    """TextWorld: quest lengths the games cycle through."""
    tw_rooms: int = 5
    """TextWorld: rooms per game."""
    tw_objects: int = 10
    """TextWorld: objects per game."""
    tw_sim_p: float = 0.25
    """TextWorld simulator: probability of playing the expert's move on purpose."""
    consistency_samples: int = 0
    """ProductQA LLM base agent: answers sampled beside each greedy one, read as consistency signals (0: off)."""

    def check(self) -> None:
        """Refuse values that cannot work, naming the field."""
        if self.consistency_samples < 0:
            raise ValueError(f"consistency_samples must be >= 0 (0: off), got {self.consistency_samples}.")
        if self.consistency_samples and (self.env != "productqa" or self.agent == "simulator"
                                         or self.plugin or is_plugin(self.agent, AGENT_GROUP)
                                         or self.agent.startswith(OPENAI_PREFIX)):
            raise ValueError(f"consistency_samples={self.consistency_samples}: it samples the local LLM base agent "
                             f"of env productqa, and agent={self.agent!r} on env={self.env!r} is none; leave it at 0.")
        for name in (self.agent, self.strong):
            if is_plugin(name, AGENT_GROUP):
                resolve(name, AGENT_GROUP)  # not importable: refused before any file is written
        if self.agent_dtype not in AGENT_DTYPES:
            raise ValueError(f"agent_dtype={self.agent_dtype!r}: choose one of {AGENT_DTYPES}.")
        local_llm = not (self.plugin or self.env == "agile" or self.agent == "simulator"
                         or is_plugin(self.agent, AGENT_GROUP) or self.agent.startswith(OPENAI_PREFIX))
        if self.agent_dtype != "auto" and not local_llm:
            raise ValueError(f"agent_dtype={self.agent_dtype!r}: it sets a local LLM base agent's weights, and "
                             f"agent={self.agent!r} on env={self.env!r} is none; leave it at auto.")
        if self.plugin:
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
        if self.env == "agile":
            if self.strong != "human":
                raise ValueError(f"strong={self.strong!r}: env='agile' intervenes by seeking advice (the human's "
                                 "answer); use --strong human.")
            if is_plugin(self.agent, AGENT_GROUP) or self.agent.startswith(OPENAI_PREFIX):
                raise ValueError(f"agent={self.agent!r}: env='agile' runs the AGILE policy of --model (a model "
                                 "folder or name); use --agent llm.")
        if self.env in ("productqa", "agile"):
            if self.questions_per_episode < 1:
                raise ValueError(f"questions_per_episode must be >= 1, got {self.questions_per_episode}.")
            if len(self.sim_accuracy) != len(QUESTION_TYPES):
                raise ValueError(f"sim_accuracy={list(self.sim_accuracy)}: give one accuracy per question "
                                 f"type {QUESTION_TYPES}, in that order.")
        else:
            if self.tw_games < 1:
                raise ValueError(f"tw_games must be >= 1, got {self.tw_games}.")
            if not self.tw_quest_lengths or min(self.tw_quest_lengths) < 1:
                raise ValueError(f"tw_quest_lengths must be one or more lengths >= 1, got "
                                 f"{list(self.tw_quest_lengths)}.")
            if not 0.0 <= self.tw_sim_p <= 1.0:
                raise ValueError(f"tw_sim_p must lie in [0, 1], got {self.tw_sim_p}.")

    def dtype(self) -> str | None:
        """The base agent's weight type for the model loader (None: its default for the device)."""
        return None if self.agent_dtype == "auto" else self.agent_dtype

    @property
    def plugin(self) -> bool:
        """Whether ``env`` names a plug-in environment rather than a built-in one."""
        return self.env not in ENVS and is_plugin(self.env, ENV_GROUP)


def env_spec(config, **overrides) -> EnvSpec:
    """The ``EnvSpec`` of a command's config: its fields of the same names, then ``overrides``."""
    values = {f.name: getattr(config, f.name) for f in fields(EnvSpec) if hasattr(config, f.name)}
    values |= overrides
    for name in ("groups", "sim_accuracy", "tw_quest_lengths"):  # lists in configs, hashable here
        if values.get(name) is not None:
            values[name] = tuple(values[name])
    return EnvSpec(**values)


class EnvSetup:
    """Builds the episodes (any split, any seed, any indices) and the two actors of one ``EnvSpec``."""

    def __init__(self, spec: EnvSpec):
        spec.check()
        self.spec = spec
        self.root = self._data_root() if spec.env in ("productqa", "agile") else None
        self._sources: dict[str, object] = {}

    def _data_root(self) -> Path:
        if self.spec.data:
            return Path(self.spec.data).expanduser().resolve()
        if self.spec.env == "agile":
            from agile.envs.productqa import default_productqa_root

            return Path(default_productqa_root()).resolve()
        from agile.envs.catalog_generator import default_catalog_dir

        return Path(default_catalog_dir(seed=0)).resolve()

    def source(self, split: str | None = None):
        """The episode source of ``split`` (default: the spec's), built once."""
        split = split or self.spec.split
        if split not in self._sources:
            s = self.spec
            if s.plugin:
                self._sources[split] = PluginSource(s.env, split)
            elif s.env == "agile":
                from agile.executor.episode import AgileSource

                self._sources[split] = AgileSource(self.root, split, list(s.groups) if s.groups else None,
                                                   model=s.agent, device=s.device,
                                                   max_new_tokens=s.max_new_tokens, decoding=s.decoding)
            elif s.env == "productqa":
                from agile.envs.productqa_env import ProductQASource

                self._sources[split] = ProductQASource(self.root, split, list(s.groups) if s.groups else None)
            else:
                from agile.envs.textworld_env import TextWorldSource  # games are generated on first use

                self._sources[split] = TextWorldSource(split, s.tw_games, s.tw_quest_lengths, s.tw_rooms,
                                                       s.tw_objects)
        return self._sources[split]

    def episodes(self, indices, seed: int, split: str | None = None) -> list:
        """Fresh episodes ``indices`` of ``split``; episode ``i`` depends only on ``(seed, i)``."""
        source = self.source(split)
        if self.spec.env == "productqa" and not self.spec.plugin:
            return source.episodes(indices, seed, self.spec.questions_per_episode,
                                   gold_features=self.spec.gold_features)
        if self.spec.env == "agile":
            return source.episodes(indices, seed, self.spec.questions_per_episode)
        return source.episodes(indices, seed)

    @property
    def horizon(self) -> int:
        """The most decisions an episode can have (the budget of "always intervene")."""
        if self.spec.plugin:
            if not self.source().max_horizon:
                raise ValueError(f"env={self.spec.env!r}: a plug-in env's horizon is known once episodes are built; "
                                 "call episodes() first.")
        elif self.spec.env in ("productqa", "agile"):
            return self.spec.questions_per_episode
        return self.source().max_horizon

    def base_agent(self):
        s = self.spec
        if is_plugin(s.agent, AGENT_GROUP):
            return make_agent(s.agent)
        if s.agent.startswith(OPENAI_PREFIX):
            return self._openai_agent(s.agent, BASE, s.agent_seed)
        if s.plugin:
            raise PluginError(f"env={s.env!r} is a plug-in environment: agent={s.agent!r} is a built-in agent of "
                              "productqa/textworld; name a plug-in agent (module:factory or a helpgate.agents "
                              "entry point).")
        if s.env == "agile":
            return self.source().agent()  # the LLM policy the episodes reflect with, loaded once
        if s.env == "textworld":
            from agile.agents.textworld_agents import TextWorldLLMAgent, TextWorldSimulatorAgent

            if s.agent == "simulator":
                return TextWorldSimulatorAgent(p=s.tw_sim_p, seed=s.agent_seed)
            return TextWorldLLMAgent(s.agent, device=s.device, seed=s.agent_seed, dtype=s.dtype())
        if s.agent == "simulator":
            from agile.agents.simulator_agent import SimulatorAgent

            accuracy = dict(zip(QUESTION_TYPES, s.sim_accuracy))
            return SimulatorAgent(accuracy, memory_boost=s.memory_boost, seed=s.agent_seed)
        from agile.agents.llm_agent import LLMAgent

        return LLMAgent(s.agent, device=s.device, seed=s.agent_seed, dtype=s.dtype(),
                        consistency_samples=s.consistency_samples)

    def strong_actor(self):
        """The actor of an intervention; ``None`` is the human (``episode.expert_action()``)."""
        s = self.spec
        if s.strong == "human":
            return None
        if s.strong == "human-cli":
            from agile.agents.human_agent import HumanCLIAgent

            return HumanCLIAgent()
        if is_plugin(s.strong, AGENT_GROUP):
            return make_agent(s.strong, actor=STRONG)
        if s.strong.startswith(OPENAI_PREFIX):
            return self._openai_agent(s.strong, STRONG, s.strong_seed)
        if s.plugin:
            raise PluginError(f"env={s.env!r} is a plug-in environment: strong={s.strong!r} is a built-in LLM actor "
                              "of productqa/textworld; use human (the episode's expert_action), human-cli, or a "
                              "plug-in agent.")
        if s.env == "textworld":
            from agile.agents.textworld_agents import TextWorldLLMAgent

            return TextWorldLLMAgent(s.strong, device=s.device, seed=s.strong_seed, actor=STRONG,
                                     name=f"strong:{s.strong}")
        from agile.agents.oracle_agent import StrongLLMAgent

        return StrongLLMAgent(s.strong, device=s.device, seed=s.strong_seed)

    def _openai_agent(self, name: str, actor: str, seed: int):
        """``openai:MODEL``: the LLM agents' prompts behind a chat-completions endpoint."""
        from agile.agents.openai_agent import OpenAIAgent

        model = name[len(OPENAI_PREFIX):]
        prefix = "" if actor == BASE else f"{actor}:"
        return OpenAIAgent(model, base_url=self.spec.base_url, seed=seed, actor=actor, name=f"{prefix}{name}")


@dataclass
class AgentEnvParams:
    """Simulator and game parameters shared by collection and evaluation configs (one home)."""

    sim_accuracy: list[float] = field(default_factory=lambda: [0.8, 0.4, 0.3])
    """ProductQA simulator: probability of a right answer per question type (fact_qa, search_qa, reasoning_qa)."""
    memory_boost: float = 0.0
    """ProductQA simulator: accuracy added per retrieved memory entry that came from an intervention."""
    gold_features: bool = False
    """ProductQA: give the helper the dataset's question type as type_<name> features (an ablation:
    a deployed agent never has it; off, features are only what the agent itself sees)."""
    tw_games: int = 48
    """TextWorld: games in the split (episode i plays game i mod tw_games)."""
    tw_quest_lengths: list[int] = field(default_factory=lambda: [3, 4, 5, 6, 7, 8])
    """TextWorld: quest lengths (winning moves) the games cycle through."""
    tw_rooms: int = 5
    """TextWorld: rooms per game."""
    tw_objects: int = 10
    """TextWorld: objects per game."""
    tw_sim_p: float = 0.25
    """TextWorld simulator: probability of playing the expert's move on purpose."""
    base_url: str | None = None
    """Endpoint of openai:MODEL actors, e.g. http://127.0.0.1:8000/v1 (helpgate serve); key from $OPENAI_API_KEY."""
    agent_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Weights of a local LLM base agent: auto (bfloat16 on a GPU, float32 on a CPU), or named. bfloat16 on
    a CPU with native BF16 collects about 3x faster (benchmarks/RESULTS.md) but is not the same model:
    some answers change, so keep one dtype for collection and evaluation."""
    consistency_samples: int = 0
    """ProductQA LLM base agent: k answers sampled (temperature 1, sharing the prompt's prefill) beside each greedy
    one, read as the consistency_agree / consistency_entropy signals of the PRM and helper (0: off)."""


@dataclass
class EnvConfig(AgentEnvParams):
    env: str = "productqa"
    """Environment the episodes come from: productqa, textworld, or a plug-in (module:factory or entry point)."""
    data: str | None = None
    """ProductQA root with train/ and test/ groups (default: the generated catalog of seed 0)."""
    split: str = "test"
    """Split the evaluation episodes are drawn from (held-out groups or games)."""
    episodes: int = 64
    """Evaluation episodes per (method, budget)."""
    seed: int = 1000
    """Seed of the evaluation episodes (keep it different from the collection seed)."""
    questions_per_episode: int = 8
    """ProductQA: decision points per episode."""
    agent: str = "simulator"
    """Base agent: simulator (known dynamics), a model name for an LLM agent (smollm2, a HF id, a folder), or a
    plug-in agent (module:factory or a helpgate.agents entry point)."""
    agent_seed: int = 0
    """Seed of the base agent's draws."""
    strong: str = "human"
    """Who acts on an intervention: human (the expert action), human-cli (a person at the terminal), a model
    name for a strong LLM, or a plug-in agent."""
    device: str | None = None
    """Torch device for LLM agents and models (default: cuda when available, else cpu)."""


class Environment:
    """The held-out episodes, built fresh on demand, and the two actors of an ``EnvConfig``."""

    def __init__(self, cfg: EnvConfig):
        self.cfg = cfg
        self.setup = EnvSetup(env_spec(cfg))
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
        if self.cfg.env != "productqa":
            raise ValueError(f"type_sequences needs env='productqa' (question types), got env={self.cfg.env!r}.")
        source = self.setup.source(split)
        sessions = []
        names = source.group_names
        for name in names:
            questions = source.resources(name).group.questions
            n = min(self.cfg.questions_per_episode, len(questions))
            offsets = len(questions) - n + 1
            for start in range(offsets):
                sessions.append(([q.type for q in questions[start:start + n]], 1.0 / (len(names) * offsets)))
        return sessions
