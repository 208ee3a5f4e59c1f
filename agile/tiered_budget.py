"""The tiered budget: per-episode spends of several kinds of help, each at its price, against a total
budget in cost units and an optional cap on each kind's calls.

    count = TieredBudget({"compute": 1, "stronger": 2, "human": 4}, budget=6, caps={"human": 1})
    count.spend("ep-1", "human")       # True: 4 of 6 spent, the human's one call used
    count.spend("ep-1", "human")       # False: its cap is spent
    count.spend("ep-1", "stronger")    # True: 6 of 6
    count.spend("ep-1", "compute")     # False: 1 > 0 left
    count.left("ep-1"), count.calls_left("ep-1")   # -> 0.0, {"human": 0}

It is ``agile.budget.EpisodeBudget`` with kinds: keyed by any hashable (an ``episode_id``), thread-safe,
``spend`` re-checks the price and the cap under the one lock, so threads spending the same episode at
once never exceed the budget nor a cap, whatever the order of the calls. One kind at price 1 with
``budget=C`` is ``EpisodeBudget(C)``. A caller may pass its own count (``budget_left`` in cost units,
``calls_left`` per kind): the smaller of the two binds, as ``EpisodeBudget`` reads a caller's ``budget_left``.

Prices are kept as exact fractions of their decimal text (``Fraction("0.1")``), so ten calls at 0.1
spend exactly 1 and a budget of 1 allows all ten: floats would refuse the tenth for a rounding error.

Live episodes are never dropped silently (a forgotten one would get a fresh budget): past
``max_episodes`` a new one is refused with ``TooManyEpisodes``; ``end(key)`` forgets one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Mapping
from fractions import Fraction

from agile.budget import MAX_EPISODES, TooManyEpisodes


def exact(value, what: str) -> Fraction:
    """``value`` as an exact fraction of its decimal text; refuses NaN, infinities, text and booleans."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)) or not math.isfinite(float(value)):
        raise ValueError(f"{what}={value!r}: give a finite number")
    return value if isinstance(value, Fraction) else Fraction(str(value))


class TieredBudget:
    """Spends of several kinds of help per episode: ``prices`` per call, ``budget`` in all (None: only the caps
    limit), ``caps`` on some kinds' calls. See the module docstring."""

    def __init__(self, prices: Mapping[str, float], budget: float | None, caps: Mapping[str, int] | None = None,
                 max_episodes: int = MAX_EPISODES, owner: str = "TieredBudget", end_call: str = "end(key)"):
        if not prices:
            raise ValueError("prices={}: name at least one kind of help with its price")
        self.prices = {str(k): exact(p, f"price of {k!r}") for k, p in prices.items()}
        bad = [k for k, p in self.prices.items() if p < 0]
        if bad:  # a free kind (price 0) is allowed: only its cap, if any, limits it
            raise ValueError(f"price of {bad[0]!r} is {prices[bad[0]]!r}: give a price >= 0")
        self.budget = None if budget is None else exact(budget, "budget")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"budget={budget!r}: the per-episode budget must be >= 0")
        self.caps = {}
        for kind, cap in (caps or {}).items():
            if kind not in self.prices:
                raise ValueError(f"cap on {kind!r}: not a kind of help here ({', '.join(self.prices)})")
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
                raise ValueError(f"cap on {kind!r} is {cap!r}: give a whole number of calls >= 0")
            self.caps[kind] = cap
        if int(max_episodes) < 1:
            raise ValueError(f"max_episodes={max_episodes}: must be >= 1")
        self.max_episodes, self.owner, self.end_call = int(max_episodes), owner, end_call
        self._lock = threading.Lock()
        self._spent: dict[Hashable, Fraction] = {}  # key -> cost spent (only keys that spent)
        self._calls: dict[Hashable, dict[str, int]] = {}  # key -> calls per kind

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.prices)

    # -- reads ---------------------------------------------------------------------------------------
    def left(self, key: Hashable, budget_left: float | None = None) -> float | None:
        """Cost still allowed for ``key``: the budget's rest, capped by the caller's ``budget_left`` (None: no limit)."""
        with self._lock:
            left = self._left(key, budget_left)
        return None if left is None else float(left)

    def calls_left(self, key: Hashable, calls_left: Mapping[str, int] | None = None) -> dict[str, int]:
        """Per capped kind (here or by the caller), the calls still allowed."""
        with self._lock:
            return self._calls_left(key, calls_left)

    def affordable(self, key: Hashable, budget_left: float | None = None,
                   calls_left: Mapping[str, int] | None = None) -> tuple[str, ...]:
        """The kinds one more call of which the budget and the caps allow now."""
        with self._lock:
            return tuple(k for k in self.prices if self._allows(key, k, budget_left, calls_left))

    def used(self, key: Hashable) -> float:
        """Cost spent so far for ``key`` (0 for an unknown or ended one)."""
        with self._lock:
            return float(self._spent.get(key, 0))

    def calls(self, key: Hashable) -> dict[str, int]:
        """Calls of each kind so far (kinds never called absent)."""
        with self._lock:
            return dict(self._calls.get(key, {}))

    def live(self) -> int:
        with self._lock:
            return len(self._spent)

    # -- writes --------------------------------------------------------------------------------------
    def spend(self, key: Hashable, kind: str, budget_left: float | None = None,
              calls_left: Mapping[str, int] | None = None) -> bool:
        """Count one call of ``kind`` for ``key`` if its price and its cap allow it (checked under the lock)."""
        if kind not in self.prices:
            raise ValueError(f"kind {kind!r}: not a kind of help here ({', '.join(self.prices)})")
        with self._lock:
            if not self._allows(key, kind, budget_left, calls_left):
                return False
            if key not in self._spent and len(self._spent) >= self.max_episodes:
                raise TooManyEpisodes(
                    f"{self.owner} holds {len(self._spent)} live episodes (max_episodes={self.max_episodes}): call "
                    f"{self.end_call} when an episode finishes, or reset() between evaluations.")
            self._spent[key] = self._spent.get(key, Fraction(0)) + self.prices[kind]
            calls = self._calls.setdefault(key, {})
            calls[kind] = calls.get(kind, 0) + 1
            return True

    def end(self, key: Hashable) -> None:
        """Forget the episode's spends: the same key starts with the full budget again."""
        with self._lock:
            self._spent.pop(key, None)
            self._calls.pop(key, None)

    def reset(self) -> None:
        with self._lock:
            self._spent.clear()
            self._calls.clear()

    # -- under the lock ------------------------------------------------------------------------------
    def _left(self, key: Hashable, budget_left) -> Fraction | None:
        own = None if self.budget is None else self.budget - self._spent.get(key, 0)
        if budget_left is None:
            return own
        theirs = exact(budget_left, "budget_left")
        return theirs if own is None else min(theirs, own)

    def _calls_left(self, key: Hashable, calls_left) -> dict[str, int]:
        made = self._calls.get(key, {})
        out = {k: cap - made.get(k, 0) for k, cap in self.caps.items()}
        for kind, n in (calls_left or {}).items():
            if kind not in self.prices:
                raise ValueError(f"calls_left names {kind!r}: not a kind of help here ({', '.join(self.prices)})")
            out[kind] = int(n) if kind not in out else min(out[kind], int(n))
        return out

    def _allows(self, key: Hashable, kind: str, budget_left, calls_left) -> bool:
        left = self._left(key, budget_left)
        if left is not None and self.prices[kind] > left:
            return False
        return self._calls_left(key, calls_left).get(kind, 1) > 0
