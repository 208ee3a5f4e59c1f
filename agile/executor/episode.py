"""The AGILE agent's sessions as ``agile.protocol`` episodes, so the episode loop can collect them.

    source = AgileSource(root, "train", model="runs/agile_sft")      # model loads on first use
    episodes = source.episodes(range(8), seed=0, questions_per_episode=8)
    records = run_episodes(episodes, source.agent(), budget=2, explore_p=0.3)

One episode is a window of ``questions_per_episode`` consecutive questions of one ProductQA group
(as in ``agile eval`` and PPO): the executor runs them in order and its memory carries over from
session to session, starting empty. A decision point is the start of each session, after
``[GetQuestion]`` and ``[RetrieveMemory]``, where ``[SeekAdvice]`` is possible:

- the intervention (``expert_action``) is ``[SeekAdvice]``: the human's answer is shown and
  submitted (correct by AGILE's definition), then the LLM writes its ``[Reflection]``;
- otherwise the base agent (``AgileAgent``: the LLM policy) writes the session's turns. As with a
  gate in ``agile eval``, the advice decision is taken away from the LLM: its prompt does not offer
  ``[SeekAdvice]``, so the logged sessions are the ones a helper-gated agent meets when deployed.
  A turn the executor rejects (an ``[Error]`` line) is a tool round of the same decision point:
  the loop asks the agent again, up to the executor's ``max_turns``.

The observation is the executor's own (``Executor.observation``): the context text and the
features the executor knows (memory similarity, memory size, the size of the retrieved memory);
the question type is an annotation only. A step's reward is ``1[correct]`` and ``success()`` is the
episode's accuracy: the advice cost is the solver's price per intervention (``helpgate solve
--advice-cost``), so total score = success - c * advice rate.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path

from agile.envs.product_db import ProductDB
from agile.envs.productqa import ProductGroup
from agile.envs.scripted_answers import ScriptedAnswers, gold_answer_text
from agile.envs.sessions import SplitSessions
from agile import functions as fn
from agile.executor.executor import Executor, ExecutorConfig
from agile.executor.lexical import LexicalEmbedder
from agile.executor.memory import Embedder, Memory
from agile.protocol import BASE, HUMAN, Action, Observation, StepResult


class ExternalAdvice:
    """The executor's gate when the advice decision is taken outside it (by the episode loop):
    it never intervenes on its own, and its presence takes ``[SeekAdvice]`` away from the LLM."""

    def should_intervene(self, observation: Observation, budget_left: int) -> bool:
        return False


def model_folder(name: str) -> str:
    """An SFT / PPO output folder holds the model in ``model/``; any other name is used as given."""
    inner = Path(name) / "model"
    return str(inner) if (inner / "config.json").is_file() else name


class AgileEpisode:
    """One executor episode behind the ``agile.protocol.Episode`` interface (module docstring)."""

    def __init__(self, executor: Executor, policy, episode_id: str, answers: ScriptedAnswers | None = None):
        self.executor = executor
        self.policy = policy
        """Writes the LLM turns the episode needs by itself (the reflection after advice); None when
        the executor asks for no reflection (a scripted base agent writes none)."""
        self.episode_id = episode_id
        self.horizon = len(executor.questions)
        self.answers = answers
        """The group's scripted answers (shared by its episodes), for ``distractor_action``."""

    @property
    def group(self) -> str:
        """The ProductQA group the session's questions come from (the unit intervals resample)."""
        return self.executor.group.name

    @property
    def done(self) -> bool:
        return self.executor.done

    def observe(self) -> Observation:
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} is over: it has no decision point.")
        # The context grows within a decision point when a turn is rejected: show it as it is now.
        return dataclasses.replace(self.executor.observation, state_text=self.executor.context_text())

    def step(self, action: Action) -> StepResult:
        executor = self.executor
        session = executor.session
        call = fn.parse_call(action.text)
        if call is not None and call.name == fn.SEEK_ADVICE and action.actor != BASE:
            executor.seek_advice()
        else:
            executor.act(list(action.token_ids) if action.token_ids is not None else action.text)
        # After advice the LLM reflects; that turn belongs to this decision, not to the loop.
        while not executor.done and executor.session == session and executor.awaiting == "reflection":
            executor.act(self.policy([executor])[0])
        if not executor.done and executor.session == session:
            # A rejected turn: the executor showed an error line; the same actor tries again.
            return StepResult(0.0, False, {"tool": fn.ERROR, "tool_output": executor.segments[-1].text.strip()})
        record = executor.records[-1]
        return StepResult(float(record.correct), self.done,
                          {"question_id": record.question_id, "correct": record.correct,
                           "advised": record.advised, "turns": record.turns})

    def expert_action(self) -> Action:
        """Seeking advice: the human's answer, at the advice cost."""
        return Action(fn.format_call(fn.SEEK_ADVICE).strip(), actor=HUMAN)

    # -- extras for scripted agents (known dynamics) --------------------------------------------

    def gold_action(self) -> Action:
        """The current question's gold answer as the agent's own turn (a scripted agent when right)."""
        return Action(f"{fn.PREDICT_ANSWER} {gold_answer_text(self.executor.question)}", actor=BASE)

    def distractor_action(self, rng: random.Random) -> Action:
        """A plausible wrong answer, shaped like the gold answers (``agile.envs.scripted_answers``)."""
        if self.answers is None:  # an episode built without a source: the group's answers, once
            self.answers = ScriptedAnswers(self.executor.group)
        return Action(f"{fn.PREDICT_ANSWER} {self.answers.wrong(self.executor.question, rng)}", actor=BASE)

    def success(self) -> float:
        """Accuracy over the episode's questions (an advised question counts as correct)."""
        return sum(r.correct for r in self.executor.records) / max(self.horizon, 1)

    def clone(self) -> AgileEpisode:
        return AgileEpisode(self.executor.clone(), self.policy, self.episode_id, self.answers)


class AgileAgent:
    """An LLM policy writing one turn for each episode, batched in one call: the base agent, or with
    ``actor=STRONG`` a stronger model acting on an intervention."""

    needs_episodes = True

    def __init__(self, policy, name: str = "agile", actor: str = BASE):
        self.policy = policy
        self.name = name
        self.actor = actor
        self.decisions = 0
        """Turns written (what ``helper.data.collect.print_sampling_cost`` divides by)."""

    @property
    def consistency_samples(self) -> int:
        decoder = getattr(self.policy, "constrained", None)
        return decoder.samples if decoder is not None else 0

    @property
    def act_seconds(self) -> float:
        decoder = getattr(self.policy, "constrained", None)
        return decoder.turn_seconds if decoder is not None else getattr(self.policy, "seconds", 0.0)

    @property
    def sample_seconds(self) -> float:
        decoder = getattr(self.policy, "constrained", None)
        return decoder.sample_seconds if decoder is not None else 0.0

    def act(self, observations: list[Observation], episodes: Sequence[AgileEpisode] = ()) -> list[Action]:
        if len(episodes) != len(observations):
            raise ValueError("AgileAgent.act needs the live episodes (it continues their executors' context).")
        turns = self.policy([e.executor for e in episodes])
        self.decisions += len(turns)
        tokenizer = self.policy.tokenizer
        signals = getattr(self.policy, "last_signals", None) or [{} for _ in turns]
        return [Action(tokenizer.decode(ids, skip_special_tokens=True), actor=self.actor,
                       signals=dict(s), token_ids=tuple(ids)) for ids, s in zip(turns, signals)]


def load_policy(model: str, device: str | None = None, max_new_tokens: int = 96, batch_size: int = 16,
                decoding: str = "free", dtype: str | None = None, consistency_samples: int = 0,
                consistency_seed: int = 0):
    """The greedy LLM policy of ``model`` (an SFT / PPO output folder, a name or a folder), as
    ``agile eval`` decodes; ``decoding``, ``consistency_samples`` and ``consistency_seed`` as ``LLMPolicy``;
    ``dtype``: the weights' type by name (default: the device's)."""
    import torch

    from agile.executor.policy import LLMPolicy
    from agile.models import load_causal_lm

    from agile.executor.choice_head import load_choice_head

    llm, tokenizer = load_causal_lm(model_folder(model), device=device,
                                    dtype=getattr(torch, dtype) if dtype else None)
    head = load_choice_head(model_folder(model)) if decoding == "constrained" else None
    # The weights stay as loaded: a prompt met again (another method or budget replaying the same
    # sessions) gets the turn it got before.
    return LLMPolicy(llm, tokenizer, max_new_tokens, greedy=True, batch_size=batch_size, memo=True,
                     decoding=decoding, consistency_samples=consistency_samples, consistency_seed=consistency_seed,
                     choice_head=head)


MEMORIES = ("embedding", "lexical")
"""How the executor's memory retrieves: MiniLM sentence embeddings (AGILE's), or shared content
words (``agile.executor.lexical``: no model, exact)."""


class AgileSource(SplitSessions):
    """The groups of one ProductQA split and the AGILE episodes drawn from them.

    Episode ``i`` holds the session ``agile.envs.sessions.SplitSessions`` draws for ``(seed, i)``,
    the same group and questions as the ``productqa`` stack's episode ``i``. The model, tokenizer
    and embedder load on first use, so a bad data root or group is refused before anything heavy
    loads. ``model=None``: the base agent is scripted (``agile.agents.simulator_agent``): only the
    embedded tokenizer loads (the executor keeps its context as token ids), and no reflection is
    asked for after advice (a scripted agent writes none).
    """

    def __init__(self, root: str | Path, split: str = "train", groups: Sequence[str] | None = None,
                 model: str | None = "smollm2", device: str | None = None, max_new_tokens: int = 96,
                 batch_size: int = 16, config: ExecutorConfig | None = None, decoding: str = "free",
                 memory: str = "embedding", consistency_samples: int = 0, dtype: str | None = None,
                 seed: int = 0):
        super().__init__(root, split, groups)
        if memory not in MEMORIES:
            raise ValueError(f"memory={memory!r}: choose one of {MEMORIES}.")
        self.decoding = decoding
        self.model_name, self.device = model, device
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.config = config or ExecutorConfig()
        if model is None:
            self.config = dataclasses.replace(self.config, use_reflection=False)
        self.memory = memory
        self.consistency_samples, self.dtype, self.seed = consistency_samples, dtype, seed
        """``seed``: of the base agent's draws (its consistency samples)."""
        self._databases: dict[str, ProductDB] = {}
        self._answers: dict[str, ScriptedAnswers] = {}
        self._policy = None
        self._tokenizer = None
        self._embedder = None

    @property
    def policy(self):
        """The greedy LLM policy (``load_policy``), loaded once; None with a scripted base agent."""
        if self._policy is None and self.model_name is not None:
            self._policy = load_policy(self.model_name, self.device, self.max_new_tokens, self.batch_size,
                                       self.decoding, self.dtype, self.consistency_samples, self.seed)
        return self._policy

    @property
    def tokenizer(self):
        if self.model_name is not None:
            return self.policy.tokenizer
        if self._tokenizer is None:
            from agile.models import load_tokenizer

            self._tokenizer = load_tokenizer()
        return self._tokenizer

    def agent(self) -> AgileAgent:
        if self.model_name is None:
            raise ValueError("this source's base agent is scripted (model=None): it has no LLM policy to act with.")
        return AgileAgent(self.policy, name=f"agile:{self.model_name}")

    def database(self, group: ProductGroup) -> ProductDB:
        if group.name not in self._databases:
            self._databases[group.name] = ProductDB(group)
        return self._databases[group.name]

    def answers(self, group: ProductGroup) -> ScriptedAnswers:
        if group.name not in self._answers:
            self._answers[group.name] = ScriptedAnswers(group)
        return self._answers[group.name]

    def embedder(self):
        if self._embedder is None:
            self._embedder = Embedder() if self.memory == "embedding" else LexicalEmbedder()
        return self._embedder

    def episodes(self, indices, seed: int, questions_per_episode: int = 8) -> list[AgileEpisode]:
        if questions_per_episode < 1:
            raise ValueError(f"questions_per_episode must be >= 1, got {questions_per_episode}.")
        embedder, tokenizer, policy = self.embedder(), self.tokenizer, self.policy
        out = []
        for index in indices:
            group, questions = self.window(index, seed, questions_per_episode)
            episode_id = f"agile-{self.episode_name(index, seed)}"
            executor = Executor(group, questions, tokenizer, Memory(embedder), self.config,
                                gate=ExternalAdvice(), db=self.database(group), episode_id=episode_id)
            out.append(AgileEpisode(executor, policy, episode_id, self.answers(group)))
        return out


def make_episodes(root: str | Path, split: str = "train", n: int = 16, seed: int = 0, questions_per_episode: int = 8,
                  groups: Sequence[str] | None = None, start: int = 0, model: str | None = None,
                  memory: str = "lexical", **source_options) -> list[AgileEpisode]:
    """Episodes ``start .. start+n-1`` spread round-robin over the split's groups; by default for a scripted
    base agent (``model=None``: no LLM loads) with the lexical memory (no embedding model loads)."""
    source = AgileSource(root, split, groups, model=model, memory=memory, **source_options)
    return source.episodes(range(start, start + n), seed, questions_per_episode)
