"""A chain of arithmetic: a plug-in environment, and a base agent that slips on large products.

    PYTHONPATH=. helpgate pipeline --env examples.arith_chain:make_episodes \\
        --agent examples.arith_chain:make_agent --prm-model tiny --quick --out runs/chain

An episode starts from a number and applies 3 to 5 operations in turn ("add 17", "multiply by
7", ...). At each decision the agent gives the new running total, and the total it gives is where
the next operation starts, so a slip carries on to the end: the episode succeeds (1.0) only when
the final total is the true one. Each step's reward is 1.0 when that step's arithmetic is right
given the total shown (a process reward).

The base agent (``make_agent``) adds and subtracts exactly and multiplies exactly while the
product stays below 100; above that it is right only 40% of the time and otherwise slips by a
carry (±1 or ±10). The intervention (``expert_action``) is the exact total. So one intervention
at the right step saves an episode, and the state text shows which steps are hard: what a helper
has to learn. Every draw is keyed by (split, seed, episode index) or (episode id, step), so runs
reproduce exactly.

This file is everything a plug-in environment needs: episodes that follow
``agile.protocol.Episode`` and an agent that follows ``agile.protocol.Agent``.
"""

from __future__ import annotations

import copy
import random
import re

from agile.protocol import BASE, HUMAN, Action, Observation, StepResult
from agile.seeding import derive_seed, stable_uniform

ENV = "arith_chain"
OPERATIONS = {"add": lambda total, k: total + k, "subtract": lambda total, k: total - k,
              "multiply by": lambda total, k: total * k}
HARD_PRODUCT = 100
"""Products at or above this are where the base agent slips."""
BASE_ACCURACY_HARD = 0.4


class ChainEpisode:
    """One chain of operations; the state is the running total the agent has reached."""

    def __init__(self, episode_id: str, task_id: str, start: int, operations: list[tuple[str, int]], seed: int):
        self.episode_id, self.task_id, self.seed = episode_id, task_id, seed
        self.operations = operations
        self.horizon = len(operations)
        self.total = start
        self.true_total = start
        self.position = 0

    def observe(self) -> Observation:
        name, k = self.operations[self.position]
        text = f"Running total: {self.total}.\nNext operation: {name} {k}.\nGive the new total."
        features = {"multiply": float(name == "multiply by"), "total_digits": float(len(str(abs(self.total))))}
        return Observation(self.episode_id, ENV, self.task_id, self.position, text, self.horizon, features)

    def _exact(self) -> int:
        name, k = self.operations[self.position]
        return OPERATIONS[name](self.total, k)

    def step(self, action: Action) -> StepResult:
        numbers = re.findall(r"-?\d+", action.text)
        given = int(numbers[-1]) if numbers else None
        right = given == self._exact()
        name, k = self.operations[self.position]
        self.true_total = OPERATIONS[name](self.true_total, k)
        self.total = given if given is not None else self.total
        self.position += 1
        return StepResult(reward=float(right), done=self.done, info={"right": right})

    def expert_action(self) -> Action:
        return Action(str(self._exact()), actor=HUMAN)

    @property
    def done(self) -> bool:
        return self.position >= len(self.operations)

    def success(self) -> float:
        return float(self.done and self.total == self.true_total)

    def clone(self) -> ChainEpisode:
        return copy.deepcopy(self)


def make_episodes(split: str, count: int, seed: int) -> list[ChainEpisode]:
    """The env factory: episode ``i`` depends only on ``(split, seed, i)``."""
    episodes = []
    for i in range(count):
        rng = random.Random(derive_seed(ENV, split, seed, i))
        operations = []
        for _ in range(rng.randint(3, 5)):
            name = rng.choice(list(OPERATIONS))
            k = rng.randint(2, 12) if name == "multiply by" else rng.randint(1, 30)
            operations.append((name, k))
        episodes.append(ChainEpisode(f"{ENV}-{split}-{seed}-{i}", f"{split}-{i}", rng.randint(2, 20), operations,
                                     seed))
    return episodes


class ChainAgent:
    """Reads the total and the operation from the state text; slips on large products."""

    name = "arith-chain-base"

    def act(self, observations: list[Observation]) -> list[Action]:
        return [Action(str(self._answer(o)), actor=BASE) for o in observations]

    @staticmethod
    def _answer(observation: Observation) -> int:
        total = int(re.search(r"Running total: (-?\d+)", observation.state_text).group(1))
        name, k = re.search(r"Next operation: (add|subtract|multiply by) (\d+)", observation.state_text).groups()
        exact = OPERATIONS[name](total, int(k))
        if name != "multiply by" or abs(exact) < HARD_PRODUCT:
            return exact
        if stable_uniform(observation.episode_id, observation.step, "slip") < BASE_ACCURACY_HARD:
            return exact
        rng = random.Random(derive_seed(observation.episode_id, observation.step, "carry"))
        return exact + rng.choice([-10, -1, 1, 10])


def make_agent() -> ChainAgent:
    """The agent factory: no arguments."""
    return ChainAgent()
