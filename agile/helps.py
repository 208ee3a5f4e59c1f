"""Kinds of help, each at its price: what the episode loop calls on an intervention when there are several.

    helps = [Help("compute", price=1), Help("stronger", agent=strong_model, price=2), Help("human", price=4, cap=1)]
    run_episodes(episodes, base, helps=helps, budget=6, explore_p=0.3)

- ``Help``: a kind's name, who answers it, its price per call (in the unit of the episode's budget), an optional
  cap on its calls per episode, and its weight in the exploration draw.
- Who answers: ``agent`` when given; else the episode's own expert of that kind. The plug-in contract: an episode
  that offers kinds of its own lists their names in ``help_kinds`` and answers ``expert_action(kind=name)`` for
  each; ``expert_action()`` with no kind stays its one expert (the human), so a one-kind loop needs nothing new.
  ``Help("human")`` with no agent is ``expert_action()`` on an episode that lists no kind named ``human``.
- ``draw_kind``: the exploration draw of which kind, weighted, among the affordable ones only.
- ``prices_and_caps``: what the one priced count takes (``agile.tiered_budget.TieredBudget``, which the loop, the
  recorder, the gate and the server keep): a call within the budget left and its kind's cap, in exact fractions
  (a budget of 1.5 holds three calls of 0.5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agile.protocol import HUMAN, Action, Agent, Observation


@dataclass(frozen=True)
class Help:
    """One kind of help."""

    name: str
    agent: Agent | None = None
    """Who answers a call; None: the episode's own expert of this kind (see the module docstring)."""
    price: float = 1.0
    """What one call costs, in the unit of the episode's budget."""
    cap: int | None = None
    """Most calls of this kind in an episode; None: only the budget limits it."""
    weight: float = 1.0
    """Its share of the exploration draws among the kinds affordable at a decision."""


def _finite(value, low: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= low


def as_helps(helps: Mapping | Sequence) -> tuple[Help, ...]:
    """``helps`` as checked ``Help``s: a sequence of them, or a mapping of name to a ``Help`` or an agent (price 1)."""
    if isinstance(helps, Mapping):
        helps = [h if isinstance(h, Help) else Help(str(name), h) for name, h in helps.items()]
    helps = tuple(helps)
    if not helps or not all(isinstance(h, Help) for h in helps):
        raise ValueError("helps: give one or more agile.helps.Help (or a mapping of kind name to agent)")
    seen = set()
    for h in helps:
        if not isinstance(h.name, str) or not h.name or h.name in seen:
            raise ValueError(f"helps: kind name {h.name!r} is empty or given twice; name each kind once")
        seen.add(h.name)
        if not _finite(h.price, 0):
            raise ValueError(f"help {h.name!r}: price={h.price!r}; give a finite number >= 0")
        if h.cap is not None and (isinstance(h.cap, bool) or not isinstance(h.cap, int) or h.cap < 0):
            raise ValueError(f"help {h.name!r}: cap={h.cap!r}; a cap is a whole number of calls >= 0, or None")
        if not _finite(h.weight, 0) or h.weight == 0:
            raise ValueError(f"help {h.name!r}: weight={h.weight!r}; a weight is a finite number > 0")
    return helps


def draw_kind(affordable: Sequence[Help], u: float) -> Help:
    """The kind a uniform draw ``u`` in [0, 1) picks, each affordable kind with probability weight / total weight.
    Equal whole weights pick ``affordable[int(u * n)]``: the products and sums are exact in floating point."""
    total = sum(h.weight for h in affordable)
    point, running = u * total, 0.0
    for h in affordable:
        running += h.weight
        if point < running:
            return h
    return affordable[-1]  # u * total rounded up to total


def prices_and_caps(helps: Sequence[Help]) -> tuple[dict[str, float], dict[str, int]]:
    """``TieredBudget``'s ``prices`` and ``caps`` of ``helps``."""
    return {h.name: h.price for h in helps}, {h.name: h.cap for h in helps if h.cap is not None}


class EpisodeExpert:
    """The episodes' own expert of one kind, as an agent the loop batches like any other (``needs_episodes``)."""

    needs_episodes = True

    def __init__(self, kind: str):
        self.kind = kind
        self.name = f"expert:{kind}"

    def act(self, observations: list[Observation], episodes=None) -> list[Action]:
        return [expert_action(episode, self.kind) for episode in episodes]


def expert_action(episode, kind: str) -> Action:
    """The episode's expert answer of ``kind``: ``expert_action(kind=kind)`` if the episode lists the kind in
    ``help_kinds``, ``expert_action()`` for ``human`` where it does not; any other kind is refused naming it."""
    own = tuple(getattr(episode, "help_kinds", ()) or ())
    if kind in own:
        return episode.expert_action(kind=kind)
    if kind == HUMAN:
        return episode.expert_action()
    raise ValueError(f"help {kind!r} has no agent, and episode {episode.episode_id!r} offers no expert of that kind "
                     f"(its help_kinds: {list(own) or 'none'}); give the Help an agent, or list the kind in the "
                     "episode's help_kinds and answer expert_action(kind=...)")
