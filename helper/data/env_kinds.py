"""Environment kinds: everything that differs between environments, one entry per built-in one.

    kind = spec.kind                       # ENV_KINDS[spec.env], or PLUGIN for an env of the user's own
    kind.fields, kind.check(spec), kind.source(setup, split), kind.horizon(setup), kind.base_agent(setup)

A kind declares the ``EnvSpec`` fields only it reads and their checks, how its episodes and actors are
built, its horizon, and the defaults the pipeline and the sweep take for it. It exists so that a new
built-in environment is one entry in ``ENV_KINDS``, not edits across collection, the pipeline, the
sweep and its methods. ``EnvSetup`` (``helper.data.environment``) calls these with itself as ``setup``;
heavy imports (torch, textworld, the executor) wait inside the methods that need them.
"""

from __future__ import annotations

from pathlib import Path

from agile.envs.productqa import QUESTION_TYPES
from agile.protocol import STRONG
from helper.data.plugins import PluginError, PluginSource


class EnvKind:
    """One kind of environment. The values here hold for every kind that does not set its own."""

    fields: tuple[str, ...] = ()
    """Fields of a command's flat config (``EnvSpec``'s, and collection's ``groups``) that only this kind
    reads: a run of another kind leaves them out of its collection manifest's identity."""
    question_sessions = False
    """Whether an episode is a session of questions, one decision each: the PRM's default target is then each
    question's own outcome (process) and the horizon is the questions per episode."""
    decide_after = "state"
    """The pipeline's default ``--decide-after``."""
    prm_state_features = False
    """The pipeline's default for the PRM head reading the environment's state features."""
    prm_hidden = True
    """The pipeline's default for the PRM head reading the backbone's hidden state."""
    train_episodes = 64
    """The pipeline's default number of training episodes to collect (without --episodes or --quick)."""
    cross_fit_folds = 0
    """The pipeline's default --cross-fit: folds of task groups, each held out once (0: the data's own train / test
    split)."""
    exact_optimum = False
    """Whether its simulator agent's dynamics are a known model (per question type): then, with no memory
    boost and the human as the strong actor, the exact optimum is computed and the oracle is exact."""

    def check(self, spec) -> None:
        """Refuse values of its own fields that cannot work, naming the field."""
        if spec.strong == "simulator":
            raise ValueError("strong='simulator': the simulator is a base agent; use --strong human, human-cli "
                             "or a model name.")

    def data_root(self, spec) -> Path | None:
        """The resolved folder its data is read from (None: it has none)."""
        return None

    def source(self, setup, split: str):
        """The episode source of ``split``."""
        raise NotImplementedError

    def episodes(self, source, indices, seed: int, spec) -> list:
        """Fresh episodes ``indices`` of ``source``; episode ``i`` depends only on ``(seed, i)``."""
        return source.episodes(indices, seed)

    def horizon(self, setup) -> int:
        """The most decisions an episode can have: the longest its source allows."""
        return setup.source().max_horizon

    def most_interventions(self, spec) -> int:
        """The most interventions always-intervene uses in an episode, known before any is built (0: not known
        until episodes are built)."""
        return 0

    def base_agent(self, setup):
        """Its built-in base agent named by ``spec.agent`` (a plug-in or served agent is built before)."""
        raise NotImplementedError

    def strong_actor(self, setup):
        """Its built-in strong actor named by ``spec.strong`` (the human, a plug-in or served one is built before)."""
        raise NotImplementedError

    def compute_samples(self, spec, name: str) -> int | None:
        """k where the kind of help ``name`` is the base agent's own extra compute (ProductQA: ``compute``,
        ``compute@K``), refused where the base agent cannot give it; None where ``name`` is no such help (it is
        then an actor, as ``--strong`` names one). Reads the name only: nothing loads."""
        return None

    def compute_help(self, setup, name: str, samples: int):
        """The agent of that help, on the base agent's loaded model."""
        raise NotImplementedError


class ProductQA(EnvKind):
    """Sessions of questions of a ProductQA group, run by the AGILE executor, its memory carried over."""

    fields = ("data", "groups", "questions_per_episode", "sim_accuracy", "memory_boost", "gold_features",
              "restate_question", "list_advice_with_gate", "yes_no_threshold",
              "max_new_tokens", "decoding", "memory", "consistency_samples")
    question_sessions = True
    # A question's proposal is a cheap call of the base agent next to a human's answer.
    decide_after = "proposal"
    exact_optimum = True
    # Every product group held out once: 2-4 fixed test groups leave intervals as wide as the groups differ.
    cross_fit_folds = 4

    def check(self, spec) -> None:
        super().check(spec)
        if spec.questions_per_episode < 1:
            raise ValueError(f"questions_per_episode must be >= 1, got {spec.questions_per_episode}.")
        if len(spec.sim_accuracy) != len(QUESTION_TYPES):
            raise ValueError(f"sim_accuracy={list(spec.sim_accuracy)}: give one accuracy per question "
                             f"type {QUESTION_TYPES}, in that order.")

    def data_root(self, spec) -> Path:
        if spec.data:
            return Path(spec.data).expanduser().resolve()
        from agile.envs.catalog_generator import default_catalog_dir

        return Path(default_catalog_dir(seed=0)).resolve()

    def source(self, setup, split: str):
        from agile.executor.episode import AgileSource
        from agile.executor.executor import ExecutorConfig

        s = setup.spec
        # A base agent that is not a local LLM policy (the simulator, a served or plug-in agent) needs
        # no LLM here: the source then loads only a tokenizer.
        model = s.agent if setup.local_policy() else None
        return AgileSource(setup.root, split, setup.groups_of(split), model=model, device=s.device,
                           max_new_tokens=s.max_new_tokens, decoding=s.decoding, memory=s.memory,
                           config=ExecutorConfig(gold_features=s.gold_features,
                                                 restate_question=s.restate_question,
                                                 list_advice_with_gate=s.list_advice_with_gate,
                                                 yes_no_threshold=s.yes_no_threshold),
                           consistency_samples=s.consistency_samples, dtype=s.dtype(), seed=setup.agent_seed)

    def episodes(self, source, indices, seed: int, spec) -> list:
        return source.episodes(indices, seed, spec.questions_per_episode)

    def horizon(self, setup) -> int:
        return setup.spec.questions_per_episode

    def most_interventions(self, spec) -> int:
        return spec.questions_per_episode

    def base_agent(self, setup):
        s = setup.spec
        if s.agent == "simulator":
            from agile.agents.simulator_agent import SimulatorAgent

            accuracy = dict(zip(QUESTION_TYPES, s.sim_accuracy))
            return SimulatorAgent(accuracy, memory_boost=s.memory_boost, seed=setup.agent_seed)
        return setup.source().agent()  # the LLM policy the episodes reflect with, loaded once

    def strong_actor(self, setup):
        from agile.executor.episode import AgileAgent, load_policy

        s = setup.spec
        policy = load_policy(s.strong, s.device, s.max_new_tokens, decoding=s.decoding)
        return AgileAgent(policy, name=f"strong:{s.strong}", actor=STRONG)

    def compute_samples(self, spec, name: str) -> int | None:
        from agile.executor.self_consistency import samples_of

        samples = samples_of(name)
        if samples is not None and not (spec.local_llm and spec.decoding == "constrained"):
            raise ValueError(f"{name!r} plays the majority of samples of the base agent's own LLM under constrained "
                             f"decoding, and agent={spec.agent!r} with decoding={spec.decoding!r} is none; run "
                             "--agent smollm2 (or another model) with --decoding constrained, or drop the kind.")
        return samples

    def compute_help(self, setup, name: str, samples: int):
        from agile.executor.self_consistency import SelfConsistencyAgent

        # The source's policy is the base agent's (``base_agent``): one model, loaded once.
        return SelfConsistencyAgent(setup.source().policy, samples, seed=setup.agent_seed, name=name)


class TextWorld(EnvKind):
    """Generated text games; the expert wins a game in its quest's length of moves."""

    fields = ("tw_games", "tw_quest_lengths", "tw_rooms", "tw_objects", "tw_sim_p", "tw_quest_length_feature")
    # The text alone does not rank held-out games; the state features mean the same in every game.
    prm_state_features = True
    prm_hidden = False
    # At 64 episodes most of the solve's (step, bin, action) cells held under 10 rows; at 960 (86 s of
    # collection with the simulator) the held-out PRM rose from 0.72-0.79 to 0.80-0.81 (RESULTS, TextWorld).
    train_episodes = 960

    def check(self, spec) -> None:
        super().check(spec)
        if spec.tw_games < 1:
            raise ValueError(f"tw_games must be >= 1, got {spec.tw_games}.")
        if not spec.tw_quest_lengths or min(spec.tw_quest_lengths) < 1:
            raise ValueError(f"tw_quest_lengths must be one or more lengths >= 1, got "
                             f"{list(spec.tw_quest_lengths)}.")
        if not 0.0 <= spec.tw_sim_p <= 1.0:
            raise ValueError(f"tw_sim_p must lie in [0, 1], got {spec.tw_sim_p}.")

    def source(self, setup, split: str):
        from agile.envs.textworld_env import TextWorldSource  # games are generated on first use

        s = setup.spec
        return TextWorldSource(split, s.tw_games, s.tw_quest_lengths, s.tw_rooms, s.tw_objects,
                               quest_length_feature=s.tw_quest_length_feature)

    def most_interventions(self, spec) -> int:
        return max(spec.tw_quest_lengths)

    def base_agent(self, setup):
        from agile.agents.textworld_agents import TextWorldLLMAgent, TextWorldSimulatorAgent

        s = setup.spec
        if s.agent == "simulator":
            return TextWorldSimulatorAgent(p=s.tw_sim_p, seed=setup.agent_seed)
        return TextWorldLLMAgent(s.agent, device=s.device, seed=setup.agent_seed, dtype=s.dtype())

    def strong_actor(self, setup):
        from agile.agents.textworld_agents import TextWorldLLMAgent

        s = setup.spec
        return TextWorldLLMAgent(s.strong, device=s.device, seed=setup.strong_seed, actor=STRONG,
                                 name=f"strong:{s.strong}")


class PluginEnv(EnvKind):
    """An env of the user's own (``helper.data.plugins``): its factory builds the episodes, a plug-in agent
    plays them, and its horizon is known once they are built."""

    fields = ("plugin_max_steps",)

    def source(self, setup, split: str):
        return PluginSource(setup.spec.env, split, setup.spec.plugin_timeout_s, setup.spec.plugin_max_steps)

    def horizon(self, setup) -> int:
        if not setup.source().max_horizon:
            raise ValueError(f"env={setup.spec.env!r}: a plug-in env's horizon is known once episodes are built; "
                             "call episodes() first.")
        return setup.source().max_horizon

    def base_agent(self, setup):
        s = setup.spec
        raise PluginError(f"env={s.env!r} is a plug-in environment: agent={s.agent!r} is a built-in agent of "
                          "productqa/textworld; name a plug-in agent (module:factory or a helpgate.agents "
                          "entry point).")

    def strong_actor(self, setup):
        s = setup.spec
        raise PluginError(f"env={s.env!r} is a plug-in environment: strong={s.strong!r} is a built-in LLM actor "
                          "of productqa/textworld; use human (the episode's expert_action), human-cli, or a "
                          "plug-in agent.")


ENV_KINDS: dict[str, EnvKind] = {"productqa": ProductQA(), "textworld": TextWorld()}
"""The built-in environments by name."""
PLUGIN = PluginEnv()


def kind_of(env: str) -> EnvKind:
    """The kind of the env named ``env``: a built-in one, else ``PLUGIN`` (a name that is neither is refused
    by ``EnvSpec.check`` before anything is built)."""
    return ENV_KINDS.get(env, PLUGIN)
