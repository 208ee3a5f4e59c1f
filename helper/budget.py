"""Per-episode budget tracking shared by the helper gate and every baseline gate.

``BudgetedGate.should_intervene(observation, budget_left=None)`` is the ``agile.protocol.Gate``
method. It answers True only when *both* budgets allow it:

- the caller's ``budget_left`` (the episode loop's own count), when given: 0 means no;
- the gate's own per-episode budget ``budget`` (when set): the gate counts the True answers it
  gave each episode, keyed by ``observation.episode_id``, and stops at ``budget``.

So a user's agent that keeps no count can call ``gate.should_intervene(obs)`` with no second
argument, and a loop that passes its count is never overruled upwards.

An episode's count starts afresh when an ``episode_id`` is seen with a smaller ``step`` than its
last call (the same episode replayed, e.g. the same held-out episodes evaluated at another
budget), or after ``end_episode(episode_id)`` / ``reset()``. Repeated calls at the same step do
not reset. At most ``max_episodes`` episodes are remembered (least recently used dropped first).

Thread safety: the decision itself (``wants``: a classifier, a PRM forward pass) runs outside the
lock so that many episodes are decided in parallel; the budget check and the count update run
under one lock, and the budget is re-checked there, so concurrent calls for the same episode can
never spend more than its budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from agile.protocol import Observation


class BudgetedGate:
    """Base class: subclasses implement ``wants(observation, budget_left) -> bool``."""

    name = "gate"

    def __init__(self, budget: int | None = None, max_episodes: int = 100_000):
        if budget is not None and int(budget) < 0:
            raise ValueError(f"budget={budget}: the per-episode intervention budget must be >= 0")
        self.budget = None if budget is None else int(budget)
        self.max_episodes = int(max_episodes)
        self._lock = threading.Lock()
        # episode_id -> [interventions granted, last step seen]
        self._episodes: OrderedDict[str, list[int]] = OrderedDict()

    # -- what subclasses decide ---------------------------------------------------------------
    def wants(self, observation: Observation, budget_left: int) -> bool:
        """Whether to intervene here, given ``budget_left >= 1`` interventions left."""
        raise NotImplementedError

    # -- the Gate protocol ----------------------------------------------------------------------
    def should_intervene(self, observation: Observation, budget_left: int | None = None) -> bool:
        with self._lock:
            left = self._left(self._touch(observation), budget_left)
        if left <= 0 or not self.wants(observation, left):
            return False
        with self._lock:
            state = self._touch(observation)
            if self._left(state, budget_left) <= 0:
                return False
            state[0] += 1
            return True

    def budget_left(self, observation: Observation, budget_left: int | None = None) -> int:
        """Interventions this gate would still grant in the observation's episode."""
        with self._lock:
            return self._left(self._touch(observation), budget_left)

    def used(self, episode_id: str) -> int:
        """Interventions granted so far in this episode (0 for an unknown id)."""
        with self._lock:
            state = self._episodes.get(episode_id)
            return 0 if state is None else state[0]

    def end_episode(self, episode_id: str) -> None:
        with self._lock:
            self._episodes.pop(episode_id, None)

    def reset(self) -> None:
        with self._lock:
            self._episodes.clear()

    # -- internals (call with the lock held) -----------------------------------------------------
    def _touch(self, observation: Observation) -> list[int]:
        key = observation.episode_id
        state = self._episodes.get(key)
        if state is None or observation.step < state[1]:
            state = [0, observation.step]
            self._episodes[key] = state
            if len(self._episodes) > self.max_episodes:
                self._episodes.popitem(last=False)
        state[1] = observation.step
        self._episodes.move_to_end(key)
        return state

    def _left(self, state: list[int], budget_left: int | None) -> int:
        if budget_left is None and self.budget is None:
            raise ValueError(
                f"{type(self).__name__}: no budget known. Pass budget_left to should_intervene, "
                "or give the gate a per-episode budget (e.g. HelperGate.load(path, budget=2))."
            )
        own = self.budget - state[0] if self.budget is not None else None
        if budget_left is None:
            return own
        return int(budget_left) if own is None else min(int(budget_left), own)
