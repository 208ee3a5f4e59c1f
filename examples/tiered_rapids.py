"""The rapids with three kinds of help, each of known accuracy and price: *which* help to call matters.

    from examples.tiered_rapids import KINDS, make_episodes, make_agent, make_helpers
    episodes, agent, helps = make_episodes("train", 100, 0), make_agent(), make_helpers()

    collect-offline-trajectories --env examples.tiered_rapids:make_episodes \
        --agent examples.tiered_rapids:make_agent --help-kinds compute:1 stronger:2 human:4 --budget 6

The river, its texts and its base agent are ``examples.rapids``' (six crossings, the last two mostly
dangerous, each text saying the crossing's risk word). What changes is the help: instead of one
intervention that always says the marker, there are three kinds (``KINDS``), each a price per call
and a chance ``fix`` of catching the agent's slip:

- ``compute`` (price 1, fix 0.5): the agent's own second pass; it catches half of its slips.
- ``stronger`` (price 2, fix 0.8): a stronger model; it catches four slips in five.
- ``human`` (price 4, fix 1.0): always right.

Each episode offers the three kinds itself (the plug-in contract of ``agile.helps``): it lists them in
``help_kinds`` and answers ``expert_action(kind=...)`` with that kind's help; ``expert_action()`` with no kind
is the rapids' one expert, the human. So a collection names the kinds and their prices on its command line
(above) and needs no agent for them; the prices there are the user's, ``KINDS``' are the example's defaults.

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
from examples.rapids import HORIZON, RISK_ODDS_BY_STEP, RapidsEpisode
from examples.rapids import make_episodes as rapids_episodes

__all__ = ["HORIZON", "KINDS", "RISK_ODDS_BY_STEP", "RISKS", "SLIP", "Help", "HelpAgent", "TieredEpisode",
           "make_agent", "make_episodes", "make_helpers", "make_stronger", "risk_of", "risk_score"]

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


class TieredEpisode(RapidsEpisode):
    """A rapids river whose episode offers the three kinds of help itself (``help_kinds``)."""

    help_kinds = tuple(KINDS)

    def expert_action(self, kind: str | None = None) -> Action:
        """The help of ``kind`` at this crossing (the same keyed draws as ``HelpAgent``); no kind: the human."""
        if kind is None:
            return super().expert_action()
        return HelpAgent(kind).act([self.observe()])[0]


def make_episodes(split: str, count: int, seed: int) -> list[TieredEpisode]:
    """The env factory: the rapids' episodes (episode ``i`` depends only on ``(split, seed, i)``), each offering
    the three kinds."""
    return [TieredEpisode(e.episode_id, e.task_id, e.risks, e.markers, e.texts)
            for e in rapids_episodes(split, count, seed)]


def make_agent() -> CrossingAgent:
    """The agent factory: the rapids' (plain-cue's) base agent."""
    return CrossingAgent()


def make_stronger() -> HelpAgent:
    """An agent factory for the stronger kind, the same help as the episode's own: a kind may also be an actor named
    on the command line (``--help-kinds compute:1 examples.tiered_rapids:make_stronger:2 human:4``)."""
    return HelpAgent("stronger")


def make_helpers() -> dict[str, HelpAgent]:
    """One agent per kind of help, by name."""
    return {kind: HelpAgent(kind) for kind in KINDS}
