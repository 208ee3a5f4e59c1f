"""The one budget: per-episode intervention counts shared by the episode loop, the AGILE executor
and every gate, and the default largest budget.

``EpisodeBudget(budget)`` counts the interventions of each episode (keyed by any hashable: an
``episode_id``, a position) against ``budget`` per episode (``None``: no limit):

- ``left(key, budget_left=None)``: what is still allowed, the smaller of the budget's rest and the
  caller's own ``budget_left`` when given; ``None`` when neither bounds it;
- ``spend(key, budget_left=None) -> bool``: counts one intervention if one is left, re-checked under
  the lock, so threads spending the same episode at once never exceed it;
- ``used(key)``, ``end(key)`` (the key starts afresh), ``reset()``, ``live()``.

Live episodes are never dropped silently: forgetting one would hand it a fresh budget. The count
costs a few dozen bytes per episode, so it keeps every live episode up to ``max_episodes`` (default
one million) and then refuses a new one with ``TooManyEpisodes``, rather than evicting one.

``agile.rollout.run_episodes`` counts each episode's interventions with one, the executor its advice
(``agile.executor.executor``), and ``BudgetedGate`` the interventions it granted.

``BudgetedGate.should_intervene(observation, budget_left=None, proposal=None)`` is the
``agile.protocol.Gate`` method; a subclass with ``decide_after = "proposal"`` gets the base agent's
proposal in ``wants(observation, budget_left, proposal)``, the others ``wants(observation,
budget_left)``. It answers True only when *both* budgets allow it:

- the caller's ``budget_left`` (the episode loop's own count), when given: 0 means no;
- the gate's own per-episode budget ``budget`` (when set; 0 means never): the gate counts the
  True answers it gave each episode, keyed by ``observation.episode_id``, and stops at ``budget``.

So a user's agent that keeps no count can call ``gate.should_intervene(obs)`` with no second
argument, and a loop that passes its count is never overruled upwards.

The guarantee is unconditional: per ``episode_id`` the gate never grants more than ``budget``,
whatever the order of the calls (steps out of order, an episode retried from step 0, many
threads). A count starts afresh only with a new ``episode_id`` or after an explicit
``end_episode(episode_id)`` / ``reset()``; code that replays the same episode (evaluation at
several budgets) ends it first. ``agile.rollout.run_episodes`` calls ``end_episode`` when an
episode finishes. Past ``max_episodes`` live episodes a new one is refused with ``TooManyEpisodes``
(call ``end_episode`` when an episode finishes).

Thread safety: the decision itself (``wants``: a classifier, a PRM forward pass) runs outside the
lock so that many episodes are decided in parallel; the budget check and the count update run
under the count's lock, and the budget is re-checked there (``EpisodeBudget.spend``), so
concurrent calls for the same episode can never spend more than its budget.

Several kinds of help, each at its price, under a total budget and per-kind caps: ``agile.tiered_budget``
(``TieredBudget``, the same guarantee with kinds).

``largest_budget(horizon, always_used=None)`` is the default top of every budget range (the
pipeline's collection and solve, the sweep): what always-intervene spends per episode.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable

from agile.protocol import Observation

MAX_EPISODES = 1_000_000


class TooManyEpisodes(RuntimeError):
    """More live episodes than ``max_episodes``: episodes are not being ended."""


class EpisodeBudget:
    """Interventions counted per episode against ``budget`` each (``None``: no limit); thread-safe."""

    def __init__(self, budget: int | None = None, max_episodes: int = MAX_EPISODES, owner: str = "EpisodeBudget",
                 end_call: str = "end(key)"):
        if budget is not None and int(budget) < 0:
            raise ValueError(f"budget={budget}: the per-episode intervention budget must be >= 0")
        if int(max_episodes) < 1:
            raise ValueError(f"max_episodes={max_episodes}: must be >= 1")
        self.budget = None if budget is None else int(budget)
        self.max_episodes = int(max_episodes)
        self.owner, self.end_call = owner, end_call
        """Named in the ``TooManyEpisodes`` message: who holds the count and how its user ends an episode."""
        self._lock = threading.Lock()
        self._used: dict[Hashable, int] = {}  # key -> interventions spent (only keys that spent one)

    def left(self, key: Hashable, budget_left: int | None = None) -> int | None:
        """Interventions still allowed for ``key``: the budget's rest, capped by the caller's ``budget_left``;
        ``None`` when neither is set (no limit)."""
        with self._lock:
            return self._left(key, budget_left)

    def spend(self, key: Hashable, budget_left: int | None = None) -> bool:
        """Count one intervention for ``key`` if one is left (checked under the lock); False if none is."""
        with self._lock:
            left = self._left(key, budget_left)
            if left is not None and left <= 0:
                return False
            if key not in self._used and len(self._used) >= self.max_episodes:
                raise TooManyEpisodes(
                    f"{self.owner} holds {len(self._used)} live episodes (max_episodes={self.max_episodes}): call "
                    f"{self.end_call} when an episode finishes, or reset() between evaluations.")
            self._used[key] = self._used.get(key, 0) + 1
            return True

    def used(self, key: Hashable) -> int:
        """Interventions spent so far for ``key`` (0 for an unknown or ended one)."""
        with self._lock:
            return self._used.get(key, 0)

    def live(self) -> int:
        """Episodes with a count held (spent at least once and not yet ended)."""
        with self._lock:
            return len(self._used)

    def end(self, key: Hashable) -> None:
        """Forget the episode's count: the same key starts with the full budget again."""
        with self._lock:
            self._used.pop(key, None)

    def reset(self) -> None:
        """Forget every episode's count."""
        with self._lock:
            self._used.clear()

    def copy(self) -> EpisodeBudget:
        """An independent count holding the same numbers (for a cloned episode)."""
        other = EpisodeBudget(self.budget, self.max_episodes, self.owner, self.end_call)
        with self._lock:
            other._used = dict(self._used)
        return other

    def _left(self, key: Hashable, budget_left: int | None) -> int | None:
        own = None if self.budget is None else self.budget - self._used.get(key, 0)
        if budget_left is None:
            return own
        return int(budget_left) if own is None else min(int(budget_left), own)


def largest_budget(horizon: int, always_used: float | None = None) -> int:
    """The default largest budget C: what always-intervene spends per episode. Its measured mean,
    rounded up, where it has been played (the sweep); else ``horizon``, the most it can spend in an
    episode (before anything has run: the pipeline's collection and solve)."""
    if always_used is None:
        return int(horizon)
    return math.ceil(always_used - 1e-9)


class BudgetedGate:
    """Base class: subclasses implement ``wants(observation, budget_left) -> bool``."""

    name = "gate"
    decide_after = "state"
    """``"proposal"``: ``wants`` reads the base agent's proposal (``agile.protocol.Gate``)."""

    def __init__(self, budget: int | None = None, max_episodes: int = MAX_EPISODES):
        self._episode_budget = EpisodeBudget(budget, max_episodes, owner=type(self).__name__,
                                    end_call="gate.end_episode(episode_id)")

    @property
    def budget(self) -> int | None:
        """Interventions this gate grants per episode (``None``: only the caller's count limits it)."""
        return self._episode_budget.budget

    @property
    def max_episodes(self) -> int:
        """Live episodes the count holds before a new one is refused (``TooManyEpisodes``)."""
        return self._episode_budget.max_episodes

    @max_episodes.setter
    def max_episodes(self, value: int) -> None:
        self._episode_budget.max_episodes = int(value)

    # -- what subclasses decide ---------------------------------------------------------------
    def wants(self, observation: Observation, budget_left: int) -> bool:
        """Whether to intervene here, given ``budget_left >= 1`` interventions left."""
        raise NotImplementedError

    # -- the Gate protocol ----------------------------------------------------------------------
    def should_intervene(self, observation: Observation, budget_left: int | None = None, proposal=None) -> bool:
        key = observation.episode_id
        left = self._left(key, budget_left)
        if left <= 0:
            return False
        wanted = (self.wants(observation, left, proposal) if self.decide_after == "proposal"
                  else self.wants(observation, left))
        # spend re-checks under the count's lock: another thread may have spent the budget meanwhile.
        return bool(wanted) and self._episode_budget.spend(key, budget_left)

    def budget_left(self, observation: Observation, budget_left: int | None = None) -> int:
        """Interventions this gate would still grant in the observation's episode."""
        return self._left(observation.episode_id, budget_left)

    def used(self, episode_id: str) -> int:
        """Interventions granted so far in this episode (0 for an unknown or ended id)."""
        return self._episode_budget.used(episode_id)

    def live_episodes(self) -> int:
        """Episodes with a count held (granted at least once and not yet ended)."""
        return self._episode_budget.live()

    def end_episode(self, episode_id: str) -> None:
        """Forget the episode's count: the same id starts with the full budget again."""
        self._episode_budget.end(episode_id)

    def reset(self) -> None:
        """Forget every episode's count."""
        self._episode_budget.reset()

    def _left(self, key: str, budget_left: int | None) -> int:
        left = self._episode_budget.left(key, budget_left)
        if left is None:
            raise ValueError(
                f"{type(self).__name__}: no budget known. Pass budget_left to should_intervene, "
                "or give the gate a per-episode budget (e.g. HelperGate.load(path, budget=2))."
            )
        return left


class ScoredGate(BudgetedGate):
    """A budgeted gate that reads a PRM scorer: passes the episode loop's hooks on to it.

    ``record_action`` lets the scorer see what was done (the PRM reads earlier actions), and
    ``end_episode`` frees the scorer's per-episode caches along with the budget count."""

    scorer = None

    def record_action(self, observation: Observation, action_text: str) -> None:
        """Optional: tell the gate what was done at ``observation`` (the PRM reads earlier actions)."""
        if self.scorer is not None and hasattr(self.scorer, "record_action"):
            self.scorer.record_action(observation, action_text)

    def end_episode(self, episode_id: str) -> None:
        super().end_episode(episode_id)
        if self.scorer is not None and hasattr(self.scorer, "end_episode"):
            self.scorer.end_episode(episode_id)
