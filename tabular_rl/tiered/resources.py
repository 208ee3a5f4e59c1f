"""What an episode may still spend: the budget left in cost units and, per capped kind, the calls left.

Action 0 is the agent acting (free); action k = 1 .. K calls help kind k at ``prices[k - 1]``. A
resource state is the tuple (budget left, calls left of each capped kind), flattened to one index
so that the solvers carry it as one more axis of their tables, as ``solve_exact`` carries the
budget left. ``next_index[a, r]`` is where action ``a`` moves resource state ``r``, or -1 where
``a`` is not affordable there (its price above the budget left, or its cap spent): the solvers never
take such an action, so no table they return can exceed a cap or the budget in any episode.

Prices may be fractions of a unit (0.5, 1.25): ``cost_units`` scales prices and budget by the
smallest integer that makes them all whole, so the budget left stays an exact integer count.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

MAX_SCALE = 1000
"""Prices are written with at most three decimals (or as fractions whose denominators divide 1000)."""


def cost_units(prices, budget) -> tuple[tuple[int, ...], int, int]:
    """(integer prices, integer budget, scale): every price and the budget times ``scale``, made whole."""
    values = [Fraction(str(float(p))).limit_denominator(MAX_SCALE) for p in (*prices, budget)]
    for given, exact in zip((*prices, budget), values):
        if not np.isfinite(float(given)) or given < 0:
            raise ValueError(f"price or budget {given!r}: give a finite number >= 0")
        if abs(float(exact) - float(given)) > 1e-9 * (1.0 + abs(float(given))):
            raise ValueError(f"price or budget {given!r}: give it with at most three decimals (or as a fraction "
                             f"of denominator up to {MAX_SCALE}) so that costs add up exactly")
    scale = int(np.lcm.reduce([v.denominator for v in values]))
    whole = [int(v * scale) for v in values]
    return tuple(whole[:-1]), whole[-1], scale


@dataclass(frozen=True)
class Resources:
    """The resource states of one (prices, budget, caps) setting, and how each action moves between them."""

    prices: tuple[int, ...]
    """Price of kind k = 1 .. K (index k - 1), in cost units."""
    budget: int
    """Cost units an episode may spend in all, the most a resource state can hold."""
    caps: tuple[int | None, ...]
    """Per kind, the most calls in an episode (None: only the budget limits it)."""
    scale: int = 1
    """Cost units per unit of the user's prices (``cost_units``)."""

    @classmethod
    def of(cls, prices, budget, caps=None, horizon: int | None = None) -> Resources:
        """Prices and budget given in any unit (``cost_units`` makes them whole). With the ``horizon``, a cap at
        or above it never binds and is dropped, and the budget is cut to what the horizon can spend (both
        would only multiply the resource states)."""
        whole, units, scale = cost_units(prices, budget)
        caps = (None,) * len(whole) if caps is None else tuple(caps)
        if len(caps) != len(whole):
            raise ValueError(f"caps={caps!r}: give one cap (or None) per kind of help, {len(whole)} in all")
        for cap in caps:
            if cap is not None and int(cap) < 0:
                raise ValueError(f"caps={caps!r}: a cap is a number of calls >= 0, or None for no cap")
        caps = tuple(None if c is None or (horizon is not None and int(c) >= horizon) else int(c) for c in caps)
        if horizon is not None:  # an episode of T decisions cannot spend more than T dearest calls
            units = min(units, int(horizon) * max(whole, default=0))
        return cls(prices=whole, budget=units, caps=caps, scale=scale)

    @property
    def n_kinds(self) -> int:
        return len(self.prices)

    @property
    def capped(self) -> tuple[int, ...]:
        """The kinds (1 .. K) whose calls are counted."""
        return tuple(k + 1 for k, cap in enumerate(self.caps) if cap is not None)

    @property
    def shape(self) -> tuple[int, ...]:
        """(budget + 1, cap + 1 of each capped kind): the resource state as a multi-index."""
        return (self.budget + 1, *(self.caps[k - 1] + 1 for k in self.capped))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def full(self) -> int:
        """The resource state an episode starts in: all the budget, every capped kind's calls left."""
        return self.index(self.budget, {k: self.caps[k - 1] for k in self.capped})

    def index(self, budget_left, calls_left: dict | None = None):
        """Flat resource index of (budget left, {kind: calls left}); works on arrays of rows too.

        A budget left above ``budget`` is read as ``budget`` (a helper solved for B never holds more), and so
        are calls left above a kind's cap; an uncapped kind needs no entry."""
        calls_left = calls_left or {}
        parts = [np.clip(np.asarray(budget_left, dtype=np.int64), 0, self.budget)]
        for k in self.capped:
            if k not in calls_left:
                raise ValueError(f"kind {k} is capped at {self.caps[k - 1]} calls: give its calls left")
            parts.append(np.clip(np.asarray(calls_left[k], dtype=np.int64), 0, self.caps[k - 1]))
        return np.ravel_multi_index(tuple(parts), self.shape)

    def states(self) -> np.ndarray:
        """(size, 1 + capped kinds): every resource state's (budget left, calls left ...), in index order."""
        return np.array(list(itertools.product(*(range(n) for n in self.shape))), dtype=np.int64).reshape(self.size, -1)

    def next_index(self) -> np.ndarray:
        """(K + 1, size): the resource state after each action, -1 where the action is not affordable."""
        states = self.states()
        out = np.empty((self.n_kinds + 1, self.size), dtype=np.int64)
        out[0] = np.arange(self.size)
        for k in range(1, self.n_kinds + 1):
            after = states.copy()
            after[:, 0] -= self.prices[k - 1]
            if k in self.capped:
                after[:, 1 + self.capped.index(k)] -= 1
            ok = (after >= 0).all(1)
            out[k] = -1
            out[k, ok] = np.ravel_multi_index(tuple(after[ok].T), self.shape)
        return out

    def cost(self) -> np.ndarray:
        """(K + 1,) price of each action in cost units, the agent's own action free."""
        return np.array((0, *self.prices), dtype=float)
