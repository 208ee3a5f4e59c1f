"""The budget ledger of ``serve-gate``: every live episode's interventions used and its answers, in SQLite.

    ledger = Ledger("runs/demo/helper/serve-ledger.sqlite", budget=2)
    ledger.answer("ep-1", 0, request)             # the answer already given to this request, or None
    ledger.record("ep-1", 0, request, wanted=True, score=0.8, horizon=4)   # -> (granted, budget left, score)
    ledger.end("ep-1")                            # -> interventions it used (None: it was not open)

Why a file: a server that holds budgets in memory forgets them when it is killed, and a restarted one would grant
an episode its whole budget again. Here a grant and the answer that reports it are one SQLite transaction,
committed before the answer is sent, so a server killed at any moment (SIGKILL included) and restarted on the same
file never grants an episode more than its budget, and a client's retry of a decision answered before the kill gets
that answer again, spending nothing. SQLite's write-ahead log (WAL) keeps readers and the writer apart;
``sync="normal"`` (the default) makes a commit survive the process's death, ``sync="full"`` also a power loss or an
operating-system crash, at an fsync per decision (about 4 ms on a shared 2-core VM, against 0.02 ms).

Each episode keeps the budget it started with: a server restarted with another ``--budget`` applies it to new
episodes only. Ending an episode (``end``, or ``reap`` once it has been idle past ``idle_s``) deletes its rows: its
id then starts afresh, as a new episode. More than ``max_episodes`` live episodes refuse a new one
(``TooManyEpisodes``). Several kinds of help, each at its price, under a cost budget and per-kind caps:
``helper.serve.tiered_ledger`` (the same file and guarantee, the spends in cost units and each kind's calls in ``kind_calls``). ``path=None``
keeps the ledger in memory (a server in a test, or a process that wants no
file); it then lives as long as the object.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agile.budget import MAX_EPISODES, TooManyEpisodes

KIND = "helpgate.serve-ledger"
VERSION = 1
SYNC_MODES = ("normal", "full")
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (episode_id TEXT PRIMARY KEY, budget INTEGER NOT NULL, used INTEGER NOT NULL,
                                     horizon INTEGER NOT NULL, last_seen REAL NOT NULL);
CREATE INDEX IF NOT EXISTS episodes_idle ON episodes (last_seen);
CREATE TABLE IF NOT EXISTS answers (episode_id TEXT NOT NULL, step INTEGER NOT NULL, request TEXT NOT NULL,
                                    intervene INTEGER NOT NULL, budget_left INTEGER NOT NULL, score REAL,
                                    PRIMARY KEY (episode_id, step, request));
CREATE TABLE IF NOT EXISTS kind_calls (episode_id TEXT NOT NULL, kind TEXT NOT NULL, cap INTEGER, used INTEGER NOT NULL,
                                       PRIMARY KEY (episode_id, kind));
"""
ANSWER_KIND_COLUMNS = (("kind", "TEXT"), ("calls_left", "TEXT"))
"""Columns a tiered answer adds (``helper.serve.tiered_ledger``), added to a ledger file written before them."""


class Ledger:
    """Per-episode budgets and answers in one SQLite file (``None``: in memory); thread-safe."""

    def __init__(self, path: str | Path | None, budget: int, max_episodes: int = MAX_EPISODES,
                 idle_s: float = 3600.0, sync: str = "normal", clock=time.time):
        if int(budget) < 0:
            raise ValueError(f"budget={budget}: the per-episode intervention budget must be >= 0.")
        if not idle_s > 0:
            raise ValueError(f"idle_s={idle_s}: an idle episode is ended after a positive number of seconds.")
        if sync not in SYNC_MODES:
            raise ValueError(f"ledger_sync={sync!r}: choose one of {', '.join(SYNC_MODES)}.")
        self.path = None if path is None else Path(path)
        self.budget, self.max_episodes, self.idle_s = int(budget), int(max_episodes), float(idle_s)
        self.clock = clock
        self._lock = threading.Lock()  # one connection, shared by the server's worker threads
        self._db = self._open(sync)
        self._reaped_at = 0.0

    def _open(self, sync: str) -> sqlite3.Connection:
        where = ":memory:" if self.path is None else str(self.path)
        try:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(where, isolation_level=None, check_same_thread=False, timeout=30.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={sync.upper()}")
            db.executescript(SCHEMA)
            have = {row[1] for row in db.execute("PRAGMA table_info(answers)")}
            for name, kind in ANSWER_KIND_COLUMNS:
                if name not in have:
                    db.execute(f"ALTER TABLE answers ADD COLUMN {name} {kind}")
            kind = db.execute("SELECT value FROM meta WHERE key = 'kind'").fetchone()
            if kind is None:
                db.execute("INSERT INTO meta VALUES ('kind', ?), ('version', ?)", (KIND, str(VERSION)))
            elif kind[0] != KIND:
                raise ValueError(f"{where}: a SQLite file of another kind ({kind[0]!r}); pass --ledger a new path.")
        except sqlite3.DatabaseError as error:  # not a database, or one of other tables
            raise ValueError(f"{where}: not a serve-gate ledger ({error}); pass --ledger a new path.") from None
        except OSError as error:
            raise OSError(f"{where}: cannot create the ledger ({error.strerror or error}); pass --ledger a "
                          "writable path.") from None
        return db

    # -- reads -----------------------------------------------------------------------------------
    def answer(self, episode: str, step: int, request: str) -> tuple[bool, int, float | None] | None:
        """The answer already given to this request (None: never asked)."""
        with self._lock:
            row = self._db.execute("SELECT intervene, budget_left, score FROM answers WHERE episode_id = ? AND "
                                   "step = ? AND request = ?", (episode, int(step), request)).fetchone()
        return None if row is None else (bool(row[0]), int(row[1]), row[2])

    def left(self, episode: str) -> int:
        """Interventions the episode may still be granted (a new one: the whole budget)."""
        with self._lock:
            row = self._db.execute("SELECT budget - used FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
        return self.budget if row is None else max(int(row[0]), 0)

    def used(self, episode: str) -> int:
        """Interventions granted so far (0 for an unknown or ended episode)."""
        with self._lock:
            row = self._db.execute("SELECT used FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
        return 0 if row is None else int(row[0])

    def horizon(self, episode: str) -> int | None:
        """The horizon the episode's decisions were made with (None: not open)."""
        with self._lock:
            row = self._db.execute("SELECT horizon FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
        return None if row is None else int(row[0])

    def is_open(self, episode: str) -> bool:
        return self.horizon(episode) is not None

    def live(self) -> int:
        """Episodes open (asked at least once, not ended nor reaped)."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])

    # -- writes (one transaction each, committed before the caller answers) ------------------------
    def record(self, episode: str, step: int, request: str, wanted: bool | None, score: float | None,
               horizon: int) -> tuple[bool, int, float | None]:
        """Open the episode if new, grant one intervention if ``wanted`` and one is left, and keep the answer;
        ``wanted=None``: nothing was decided (no budget was left). An answer another process recorded meanwhile
        for the same request wins."""
        now = self.clock()
        with self._transaction() as db:
            first = db.execute("SELECT intervene, budget_left, score FROM answers WHERE episode_id = ? AND "
                               "step = ? AND request = ?", (episode, int(step), request)).fetchone()
            if first is not None:
                return bool(first[0]), int(first[1]), first[2]
            self._open_episode(db, episode, horizon, now)
            row = db.execute("SELECT budget, used FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
            budget, used = int(row[0]), int(row[1])
            granted = bool(wanted) and used < budget
            used += granted
            db.execute("UPDATE episodes SET used = ?, last_seen = ? WHERE episode_id = ?", (used, now, episode))
            answer = (granted, budget - used, None if wanted is None else score)
            db.execute("INSERT INTO answers (episode_id, step, request, intervene, budget_left, score) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       (episode, int(step), request, int(answer[0]), answer[1], answer[2]))
        return answer

    def _open_episode(self, db: sqlite3.Connection, episode: str, horizon: int, now: float) -> bool:
        """Open ``episode`` in the caller's transaction unless it is open (True where it was new); refuses one more
        than ``max_episodes`` live."""
        if db.execute("SELECT 1 FROM episodes WHERE episode_id = ?", (episode,)).fetchone() is not None:
            return False
        live = db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
        if live >= self.max_episodes:
            raise TooManyEpisodes(
                f"serve-gate holds {live} live episodes (max_episodes={self.max_episodes}): end each "
                "episode with POST /v1/episodes/{episode_id}/end when it finishes.")
        db.execute("INSERT INTO episodes VALUES (?, ?, 0, ?, ?)", (episode, self.budget, int(horizon), now))
        return True

    def touch(self, episode: str) -> None:
        """The episode is in use (an action reported): not idle."""
        with self._lock:
            self._db.execute("UPDATE episodes SET last_seen = ? WHERE episode_id = ?", (self.clock(), episode))

    def end(self, episode: str) -> int | None:
        """Forget the episode (its id starts afresh); the interventions it used, None when it was not open."""
        with self._transaction() as db:
            row = db.execute("SELECT used FROM episodes WHERE episode_id = ?", (episode,)).fetchone()
            forget(db, episode)
        return None if row is None else int(row[0])

    def reap(self, every_s: float | None = None) -> list[str]:
        """End the episodes idle past ``idle_s``; the ids ended. ``every_s``: skip when the last reap is more recent
        (callers reap on their requests; a pass reads an index, not every episode)."""
        now = self.clock()
        if every_s is not None and now - self._reaped_at < every_s:
            return []
        self._reaped_at = now
        with self._transaction() as db:  # one transaction: an episode touched meanwhile is not idle
            idle = [row[0] for row in db.execute("SELECT episode_id FROM episodes WHERE last_seen < ?",
                                                 (now - self.idle_s,))]
            for episode in idle:
                forget(db, episode)
        return idle

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under this process's lock, taken before any read (BEGIN IMMEDIATE: another
        process's grant cannot slip between our read and our write); committed on exit, rolled back on any error."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def forget(db: sqlite3.Connection, episode: str) -> None:
    """Delete an episode's budget and answers (inside the caller's transaction)."""
    db.execute("DELETE FROM episodes WHERE episode_id = ?", (episode,))
    db.execute("DELETE FROM answers WHERE episode_id = ?", (episode,))
    db.execute("DELETE FROM kind_calls WHERE episode_id = ?", (episode,))
