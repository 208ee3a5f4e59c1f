"""The ledger of a tiered ``serve-gate``: per live episode the cost spent and each capped kind's calls, in SQLite.

    ledger = TieredLedger("helper/serve-ledger.sqlite", prices={"compute": 1, "human": 4}, budget=6, caps={"human": 1})
    ledger.state("ep-1")                              # -> (6.0, {"human": 1}): budget left, calls left per capped kind
    ledger.record_kind("ep-1", 0, request, "human", score=0.8, horizon=6)   # -> ("human", 2.0, {"human": 0}, 0.8)

``helper.serve.ledger.Ledger`` with kinds: the same file, WAL, one write transaction per decision committed before
the answer is sent, so a server killed at any moment and restarted on the same file never grants an episode more
than its budget nor a kind more than its cap, and answers a retry as before. The episode's budget and spend are
kept in whole cost units (``tabular_rl.tiered.cost_units``: prices of 0.5 and a budget of 1.5 are 1, 3 at scale 2),
so sums are exact; each kind's calls (and its cap, null where uncapped) are rows of ``kind_calls``, written when
the episode opens (an episode keeps the caps it started with). The prices are recorded in the file: a server restarted with other prices
is refused (its open episodes' spends would be read in another unit).
"""

from __future__ import annotations

import json

from helper.serve.ledger import Ledger
from tabular_rl.tiered.resources import cost_units


class TieredLedger(Ledger):
    """See the module docstring; ``Ledger``'s ``reap``, ``touch``, ``live`` and ``horizon`` hold as they are."""

    def __init__(self, path, prices: dict[str, float], budget: float, caps: dict[str, int] | None = None, **options):
        whole, units, scale = cost_units(list(prices.values()), budget)
        super().__init__(path, units, **options)
        self.prices = dict(zip(prices, whole))
        self.scale, self.caps = scale, {k: int(c) for k, c in (caps or {}).items()}
        unknown = sorted(set(self.caps) - set(self.prices))
        if unknown:
            raise ValueError(f"caps name {unknown}: the helper's kinds are {', '.join(self.prices)}")
        record = json.dumps({"prices": {k: float(p) for k, p in prices.items()}}, sort_keys=True)
        with self._transaction() as db:
            found = db.execute("SELECT value FROM meta WHERE key = 'tiered'").fetchone()
            if found is None:
                db.execute("INSERT INTO meta VALUES ('tiered', ?)", (record,))
            elif found[0] != record:
                raise ValueError(f"{self.path}: a ledger of kinds priced {found[0]}, not {record}; its open episodes' "
                                 "spends are in those prices: pass --ledger a new path.")

    @property
    def cost_budget(self) -> float:
        """What a new episode may spend, in the unit of the prices."""
        return self.budget / self.scale

    def state(self, episode: str) -> tuple[float, dict[str, int]]:
        """(budget left, {capped kind: calls left}) of the episode (a new one: the whole budget and caps)."""
        with self._lock:
            units, calls = self._state(self._db, episode)
        return units / self.scale, calls

    def _state(self, db, episode: str) -> tuple[int, dict[str, int]]:
        row = db.execute("SELECT budget - used FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
        if row is None:
            return self.budget, dict(self.caps)
        calls = {k: max(int(cap) - int(used), 0) for k, cap, used in
                 db.execute("SELECT kind, cap, used FROM kind_calls WHERE episode_id = ? AND cap IS NOT NULL",
                            (episode,))}
        return max(int(row[0]), 0), calls

    def kind_answer(self, episode: str, step: int, request: str):
        """The answer already given to this request, ``(kind, budget left, calls left, score)``; None: never asked."""
        with self._lock:
            row = self._db.execute("SELECT kind, budget_left, calls_left, score FROM answers WHERE episode_id = ? AND "
                                   "step = ? AND request = ?", (episode, int(step), request)).fetchone()
        return None if row is None else self._answer(row)

    def _answer(self, row) -> tuple[str | None, float, dict[str, int], float | None]:
        return row[0] or None, int(row[1]) / self.scale, json.loads(row[2] or "{}"), row[3]

    def record_kind(self, episode: str, step: int, request: str, wanted: str | None, score: float | None,
                    horizon: int) -> tuple[str | None, float, dict[str, int], float | None]:
        """Open the episode if new, grant one call of ``wanted`` if its price and cap allow it (re-checked in the
        transaction: another process may have spent meanwhile), and keep the answer; None: the agent acts."""
        if wanted is not None and wanted not in self.prices:
            raise ValueError(f"kind {wanted!r}: the helper's kinds are {', '.join(self.prices)}")
        now = self.clock()
        with self._transaction() as db:
            first = db.execute("SELECT kind, budget_left, calls_left, score FROM answers WHERE episode_id = ? AND "
                               "step = ? AND request = ?", (episode, int(step), request)).fetchone()
            if first is not None:
                return self._answer(first)
            if self._open_episode(db, episode, horizon, now):
                db.executemany("INSERT INTO kind_calls VALUES (?, ?, ?, 0)",
                               [(episode, k, self.caps.get(k)) for k in self.prices])  # every kind's calls counted
            left, calls = self._state(db, episode)
            allowed = wanted is not None and self.prices[wanted] <= left and calls.get(wanted, 1) > 0
            granted = wanted if allowed else None
            if granted is not None:
                db.execute("UPDATE episodes SET used = used + ? WHERE episode_id = ?", (self.prices[granted], episode))
                db.execute("UPDATE kind_calls SET used = used + 1 WHERE episode_id = ? AND kind = ?",
                           (episode, granted))
                left -= self.prices[granted]
                calls = {k: n - (k == granted) for k, n in calls.items()}
            db.execute("UPDATE episodes SET last_seen = ? WHERE episode_id = ?", (now, episode))
            answer = (granted, left / self.scale, calls, score)
            db.execute("INSERT INTO answers (episode_id, step, request, intervene, budget_left, score, kind, "
                       "calls_left) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (episode, int(step), request, int(granted is not None), left,
                                                          score, granted, json.dumps(calls, sort_keys=True)))
        return answer

    def end(self, episode: str) -> float | None:
        """Forget the episode (its id starts afresh); the cost it spent, None when it was not open."""
        used = super().end(episode)
        return None if used is None else used / self.scale

    def spent(self, episode: str) -> tuple[float, dict[str, int]]:
        """(cost spent, {kind: calls made}) so far (0 and {} for an unknown or ended episode)."""
        with self._lock:
            row = self._db.execute("SELECT used FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
            calls = dict(self._db.execute("SELECT kind, used FROM kind_calls WHERE episode_id = ?", (episode,)))
        return (0.0 if row is None else int(row[0]) / self.scale), calls
