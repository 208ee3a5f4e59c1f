"""A plug-in environment and two stochastic agents for the common-random-numbers test.

Each episode asks ``STEPS`` yes/no questions; the base agent is right with probability ``ACCURACY`` per
question (a coin of its own), the intervention is always right, success is the share answered right.
``keyed_agent`` draws from the seed the episode loop hands it (``observation.rng()``); ``own_random_agent``
keeps one ``random.Random`` across calls, as a user would write it first.
"""

from __future__ import annotations

import random

from agile.protocol import BASE, HUMAN, Action, Observation, StepResult
from agile.seeding import derive_seed

STEPS = 4
ACCURACY = 0.5


class CoinEpisode:
    def __init__(self, episode_id: str, answers: list[str]):
        self.episode_id, self.answers = episode_id, answers
        self.horizon, self.position, self.right = STEPS, 0, 0

    def observe(self) -> Observation:
        text = f"Question {self.position + 1}: is it yes or no?"
        return Observation(self.episode_id, "coins", f"{self.episode_id}/q{self.position}", self.position, text,
                           self.horizon)

    def step(self, action: Action) -> StepResult:
        right = action.text == "right" or action.text == self.answers[self.position]
        self.right += right
        self.position += 1
        return StepResult(float(right), self.done)

    def expert_action(self) -> Action:
        return Action(self.answers[self.position], actor=HUMAN)

    @property
    def done(self) -> bool:
        return self.position >= STEPS

    def success(self) -> float:
        return self.right / STEPS

    def clone(self) -> CoinEpisode:
        other = CoinEpisode(self.episode_id, self.answers)
        other.position, other.right = self.position, self.right
        return other


def make_episodes(split: str, count: int, seed: int) -> list[CoinEpisode]:
    return [CoinEpisode(f"{split}-{seed}-{i}",
                        ["yes" if random.Random(derive_seed(split, seed, i, k)).random() < 0.5 else "no"
                         for k in range(STEPS)]) for i in range(count)]


class CoinAgent:
    def __init__(self, keyed: bool):
        self.keyed = keyed
        self.name = "keyed" if keyed else "own-random"
        self.own = random.Random(0)

    def act(self, observations: list[Observation]) -> list[Action]:
        draws = [(o.rng() if self.keyed else self.own).random() for o in observations]
        return [Action("right" if u < ACCURACY else "wrong", actor=BASE) for u in draws]


def keyed_agent() -> CoinAgent:
    return CoinAgent(keyed=True)


def own_random_agent() -> CoinAgent:
    return CoinAgent(keyed=False)
