"""The rapids with three kinds of help, each of known accuracy and price: *which* help to call matters.

    from examples.tiered_rapids import KINDS, make_episodes, make_agent, make_helpers
    episodes, agent, helps = make_episodes("train", 100, 0), make_agent(), make_helpers()

The river, its texts and its base agent are ``examples.rapids``' (six crossings, the last two mostly
dangerous, each text saying the crossing's risk word). What changes is the help: instead of one
intervention that always says the marker, there are three kinds (``KINDS``), each a price per call
and a chance ``fix`` of catching the agent's slip:

- ``compute`` (price 1, fix 0.5): the agent's own second pass; it catches half of its slips.
- ``stronger`` (price 2, fix 0.8): a stronger model; it catches four slips in five.
- ``human`` (price 4, fix 1.0): always right.

A helped crossing is lost only when the agent would have slipped (probability ``SLIP[risk]``) and the
help misses it (``1 - fix``), so its slip probability is ``SLIP[risk] * (1 - fix)``. Each help is an
agent (``make_helpers``) that draws the agent's own slip (the same keyed draw) and its own catch, so
runs reproduce and every kind is paired with the agent on the same slips.

With a budget in price units per episode, the best helper mixes the kinds: cheap compute where the
crossing is tricky and the budget short, the human at the rapids when enough is left.
``examples.tiered_rapids_optimum`` computes the exact optimum under each budget and the best
helper restricted to one kind. ``risk_score`` is the example's own cue (the risk word in the text)
as a score in [0, 1), so three uniform bins are the three risk words and no PRM is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agile.protocol import HUMAN, STRONG, Action, Observation
from agile.seeding import derive_seed, stable_uniform
from examples.plain_cue import SLIP, CrossingAgent
from examples.rapids import HORIZON, RISK_ODDS_BY_STEP, make_episodes

__all__ = ["HORIZON", "KINDS", "RISK_ODDS_BY_STEP", "RISKS", "SLIP", "Help", "HelpAgent", "make_agent",
           "make_episodes", "make_helpers", "risk_of", "risk_score"]

RISKS = tuple(SLIP)
"""The risk words, calm to dangerous: a state's index in the tiered model."""


@dataclass(frozen=True)
class Help:
    price: float
    """What one call costs, in the unit of the episode's budget."""
    fix: float
    """Probability that the help catches a slip the agent would have made."""


KINDS = {"compute": Help(price=1, fix=0.5), "stronger": Help(price=2, fix=0.8), "human": Help(price=4, fix=1.0)}
"""The kinds of help, cheapest first."""

_RISK = re.compile(r"\b(" + "|".join(RISKS) + r")\b")
_MARKER = re.compile(r"marker (\d+)")


def risk_of(state_text: str) -> str:
    """The crossing's risk word, read from its text (each text holds exactly one)."""
    return _RISK.search(state_text).group(1)


def risk_score(state_text: str) -> float:
    """The cue as a score: the middle of the risk word's third of [0, 1), so ``Discretizer(3, "uniform")`` maps it
    back to the risk's index."""
    return (RISKS.index(risk_of(state_text)) + 0.5) / len(RISKS)


def slips(observation: Observation, fix: float = 0.0, kind: str = "") -> bool:
    """Whether the crossing is lost: the agent's own keyed slip draw (plain-cue's), not caught by a help of ``fix``."""
    risk = risk_of(observation.state_text)
    agent_slips = stable_uniform(observation.episode_id, observation.step, "slip") < SLIP[risk]
    return agent_slips and stable_uniform(observation.episode_id, observation.step, "catch", kind) >= fix


class HelpAgent:
    """One kind of help: says the marker, wrong only where the agent slips and this help misses it."""

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: the kinds are {', '.join(KINDS)}")
        self.name, self.fix = kind, KINDS[kind].fix
        self.actor = HUMAN if kind == "human" else STRONG

    def act(self, observations: list[Observation]) -> list[Action]:
        return [Action(f"The marker is {self._answer(o)}.", actor=self.actor) for o in observations]

    def _answer(self, observation: Observation) -> int:
        marker = int(_MARKER.search(observation.state_text).group(1))
        if not slips(observation, self.fix, self.name):
            return marker
        return marker + (1 if derive_seed(observation.episode_id, observation.step, "stone", self.name) % 2 else -1)


def make_agent() -> CrossingAgent:
    """The agent factory: the rapids' (plain-cue's) base agent."""
    return CrossingAgent()


def make_helpers() -> dict[str, HelpAgent]:
    """One agent per kind of help, by name."""
    return {kind: HelpAgent(kind) for kind in KINDS}
