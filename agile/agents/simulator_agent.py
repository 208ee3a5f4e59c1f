"""A scripted agent with known dynamics: right with a configured probability per question type.

    agent = SimulatorAgent({"fact_qa": 0.8, "search_qa": 0.4, "reasoning_qa": 0.3},
                           memory_boost=0.1, seed=0)

At each decision it is right with probability

    p = min(1, accuracy[type] + memory_boost * memory_advice_hits)

where ``memory_advice_hits`` (an observation feature) counts the retrieved memory entries that
came from an intervention: earlier help makes later questions easier, as in AGILE, so the value of
intervening depends on when. When right it gives the gold answer, otherwise a plausible wrong one
(``episode.distractor_action``). Correctness is ``u < p`` with ``u`` a pure function of
``(seed, episode_id, step)``: results do not depend on batching, and a cloned episode replays the
same draws (common random numbers for counterfactual rollouts). ``success_probability`` exposes
``p`` so an exact optimum over intervention policies can be computed.

It reads the gold answer from the live episode (``needs_episodes = True``): the rollout loop
passes the episodes along with the observations.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from agile.envs.scripted_answers import question_type
from agile.protocol import BASE, Action, Episode, Observation
from agile.seeding import derive_seed, stable_uniform

DEFAULT_ACCURACY = {"fact_qa": 0.8, "search_qa": 0.4, "reasoning_qa": 0.3}


class SimulatorAgent:
    """See the module docstring. ``default_accuracy`` covers question types not listed."""

    needs_episodes = True

    def __init__(
        self,
        accuracy: Mapping[str, float] | None = None,
        memory_boost: float = 0.0,
        seed: int = 0,
        default_accuracy: float = 0.5,
        name: str = "simulator",
    ):
        self.accuracy = dict(DEFAULT_ACCURACY if accuracy is None else accuracy)
        for qtype, value in [*self.accuracy.items(), ("default_accuracy", default_accuracy)]:
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"SimulatorAgent accuracy for {qtype!r} is {value}; it must lie in [0, 1].")
        if memory_boost < 0:
            raise ValueError(f"SimulatorAgent memory_boost must be >= 0, got {memory_boost}.")
        self.memory_boost = float(memory_boost)
        self.default_accuracy = float(default_accuracy)
        self.seed = seed
        self.name = name

    def success_probability(self, observation: Observation) -> float:
        """The probability that this agent answers ``observation`` correctly."""
        base = self.accuracy.get(question_type(observation), self.default_accuracy)
        boost = self.memory_boost * observation.features.get("memory_advice_hits", 0.0)
        return min(1.0, base + boost)

    def is_right(self, observation: Observation) -> bool:
        """The draw this agent makes at this decision point (deterministic)."""
        u = stable_uniform(self.seed, observation.episode_id, observation.step, "simulator")
        return u < self.success_probability(observation)

    def act(self, observations: Sequence[Observation], episodes: Sequence[Episode] | None = None) -> list[Action]:
        if episodes is None or len(episodes) != len(observations):
            raise ValueError(
                "SimulatorAgent reads the gold answer from the live episodes: call "
                "act(observations, episodes=...) with one episode per observation (run_episodes does)."
            )
        actions = []
        for observation, episode in zip(observations, episodes):
            if self.is_right(observation):
                # The gold answer as its own turn; an episode without one (a plug-in's) has its
                # expert's action for it.
                gold = getattr(episode, "gold_action", None)
                actions.append(Action((gold() if gold else episode.expert_action()).text, actor=BASE))
            else:
                rng = random.Random(derive_seed(self.seed, observation.episode_id, observation.step, "wrong"))
                distractor = getattr(episode, "distractor_action", None)
                text = distractor(rng).text if distractor else "[PredictAnswer] not sure"
                actions.append(Action(text, actor=BASE))
        return actions
