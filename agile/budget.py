"""Per-episode budget tracking shared by the helper gate and every baseline gate.

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
episode finishes.

Live episodes are never dropped silently: forgetting one would hand it a fresh budget. The
count costs a few dozen bytes per episode, so the gate keeps every live episode up to
``max_episodes`` (default one million) and then refuses a new one with ``TooManyEpisodes``
(call ``end_episode`` when an episode finishes), rather than evicting one.

Thread safety: the decision itself (``wants``: a classifier, a PRM forward pass) runs outside the
lock so that many episodes are decided in parallel; the budget check and the count update run
under one lock, and the budget is re-checked there, so concurrent calls for the same episode can
never spend more than its budget.
"""

from __future__ import annotations

import threading

from agile.protocol import Observation

MAX_EPISODES = 1_000_000


class TooManyEpisodes(RuntimeError):
    """More live episodes than ``max_episodes``: episodes are not being ended."""


class BudgetedGate:
    """Base class: subclasses implement ``wants(observation, budget_left) -> bool``."""

    name = "gate"
    decide_after = "state"
    """``"proposal"``: ``wants`` reads the base agent's proposal (``agile.protocol.Gate``)."""

    def __init__(self, budget: int | None = None, max_episodes: int = MAX_EPISODES):
        if budget is not None and int(budget) < 0:
            raise ValueError(f"budget={budget}: the per-episode intervention budget must be >= 0")
        if int(max_episodes) < 1:
            raise ValueError(f"max_episodes={max_episodes}: must be >= 1")
        self.budget = None if budget is None else int(budget)
        self.max_episodes = int(max_episodes)
        self._lock = threading.Lock()
        self._granted: dict[str, int] = {}  # episode_id -> interventions granted

    # -- what subclasses decide ---------------------------------------------------------------
    def wants(self, observation: Observation, budget_left: int) -> bool:
        """Whether to intervene here, given ``budget_left >= 1`` interventions left."""
        raise NotImplementedError

    # -- the Gate protocol ----------------------------------------------------------------------
    def should_intervene(self, observation: Observation, budget_left: int | None = None, proposal=None) -> bool:
        key = observation.episode_id
        with self._lock:
            left = self._left(key, budget_left)
        if left <= 0:
            return False
        wanted = (self.wants(observation, left, proposal) if self.decide_after == "proposal"
                  else self.wants(observation, left))
        if not wanted:
            return False
        with self._lock:
            # Re-checked under the lock: another thread may have spent the budget meanwhile.
            if self._left(key, budget_left) <= 0:
                return False
            if key not in self._granted and len(self._granted) >= self.max_episodes:
                raise TooManyEpisodes(
                    f"{type(self).__name__} holds {len(self._granted)} live episodes (max_episodes="
                    f"{self.max_episodes}): call gate.end_episode(episode_id) when an episode finishes, "
                    "or gate.reset() between evaluations."
                )
            self._granted[key] = self._granted.get(key, 0) + 1
            return True

    def budget_left(self, observation: Observation, budget_left: int | None = None) -> int:
        """Interventions this gate would still grant in the observation's episode."""
        with self._lock:
            return self._left(observation.episode_id, budget_left)

    def used(self, episode_id: str) -> int:
        """Interventions granted so far in this episode (0 for an unknown or ended id)."""
        with self._lock:
            return self._granted.get(episode_id, 0)

    def live_episodes(self) -> int:
        """Episodes with a count held (granted at least once and not yet ended)."""
        with self._lock:
            return len(self._granted)

    def end_episode(self, episode_id: str) -> None:
        """Forget the episode's count: the same id starts with the full budget again."""
        with self._lock:
            self._granted.pop(episode_id, None)

    def reset(self) -> None:
        """Forget every episode's count."""
        with self._lock:
            self._granted.clear()

    # -- internals (call with the lock held) -----------------------------------------------------
    def _left(self, key: str, budget_left: int | None) -> int:
        if budget_left is None and self.budget is None:
            raise ValueError(
                f"{type(self).__name__}: no budget known. Pass budget_left to should_intervene, "
                "or give the gate a per-episode budget (e.g. HelperGate.load(path, budget=2))."
            )
        own = None if self.budget is None else self.budget - self._granted.get(key, 0)
        if budget_left is None:
            return own
        return int(budget_left) if own is None else min(int(budget_left), own)


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
