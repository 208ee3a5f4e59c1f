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
from collections.abc import Sequence
from pathlib import Path

from agile.envs.product_db import ProductDB
from agile.envs.productqa import ProductGroup
from agile.envs.sessions import SplitSessions
from agile.executor import functions as fn
from agile.executor.executor import Executor, ExecutorConfig
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

    def __init__(self, executor: Executor, policy, episode_id: str):
        self.executor = executor
        self.policy = policy
        """Writes the LLM turns the episode needs by itself (the reflection after advice)."""
        self.episode_id = episode_id
        self.horizon = len(executor.questions)

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

    def success(self) -> float:
        """Accuracy over the episode's questions (an advised question counts as correct)."""
        return sum(r.correct for r in self.executor.records) / max(self.horizon, 1)

    def clone(self) -> AgileEpisode:
        return AgileEpisode(self.executor.clone(), self.policy, self.episode_id)


class AgileAgent:
    """The base agent: the LLM policy writes one turn for each episode, batched in one call."""

    needs_episodes = True

    def __init__(self, policy, name: str = "agile"):
        self.policy = policy
        self.name = name

    def act(self, observations: list[Observation], episodes: Sequence[AgileEpisode] = ()) -> list[Action]:
        if len(episodes) != len(observations):
            raise ValueError("AgileAgent.act needs the live episodes (it continues their executors' context).")
        turns = self.policy([e.executor for e in episodes])
        tokenizer = self.policy.tokenizer
        return [Action(tokenizer.decode(ids, skip_special_tokens=True), actor=BASE, token_ids=tuple(ids))
                for ids in turns]


class AgileSource(SplitSessions):
    """The groups of one ProductQA split and the AGILE episodes drawn from them.

    Episode ``i`` holds the session ``agile.envs.sessions.SplitSessions`` draws for ``(seed, i)``,
    the same group and questions as the ``productqa`` stack's episode ``i``. The model, tokenizer
    and embedder load on first use, so a bad data root or group is refused before anything heavy
    loads.
    """

    def __init__(self, root: str | Path, split: str = "train", groups: Sequence[str] | None = None,
                 model: str = "smollm2", device: str | None = None, max_new_tokens: int = 96,
                 batch_size: int = 16, config: ExecutorConfig | None = None, decoding: str = "free"):
        super().__init__(root, split, groups)
        self.decoding = decoding
        self.model_name, self.device = model, device
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.config = config or ExecutorConfig()
        self._databases: dict[str, ProductDB] = {}
        self._policy = None
        self._embedder: Embedder | None = None

    @property
    def policy(self):
        """The greedy LLM policy (as ``agile eval`` decodes; ``decoding`` as ``LLMPolicy``), loaded once."""
        if self._policy is None:
            from agile.executor.policy import LLMPolicy
            from agile.models import load_causal_lm

            model, tokenizer = load_causal_lm(model_folder(self.model_name), device=self.device)
            # The weights stay as loaded: a prompt met again (another method or budget replaying
            # the same sessions) gets the turn it got before.
            self._policy = LLMPolicy(model, tokenizer, self.max_new_tokens, greedy=True,
                                     batch_size=self.batch_size, memo=True, decoding=self.decoding)
        return self._policy

    def agent(self) -> AgileAgent:
        return AgileAgent(self.policy, name=f"agile:{self.model_name}")

    def database(self, group: ProductGroup) -> ProductDB:
        if group.name not in self._databases:
            self._databases[group.name] = ProductDB(group)
        return self._databases[group.name]

    def episodes(self, indices, seed: int, questions_per_episode: int = 8) -> list[AgileEpisode]:
        if questions_per_episode < 1:
            raise ValueError(f"questions_per_episode must be >= 1, got {questions_per_episode}.")
        if self._embedder is None:
            self._embedder = Embedder()
        policy = self.policy
        out = []
        for index in indices:
            group, questions = self.window(index, seed, questions_per_episode)
            episode_id = f"agile-{self.episode_name(index, seed)}"
            executor = Executor(group, questions, policy.tokenizer, Memory(self._embedder), self.config,
                                gate=ExternalAdvice(), db=self.database(group), episode_id=episode_id)
            out.append(AgileEpisode(executor, policy, episode_id))
        return out
