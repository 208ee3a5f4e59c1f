"""Record an agent that runs its own loop: exploratory interventions in, trajectory shards out.

    from agile.protocol import Observation
    from helper import Recorder

    rec = Recorder("trajectories", explore_p=[0.0, 0.2, 0.5], budget=2, seed=0)
    for episode_id, task in my_tasks():
        if rec.is_recorded(episode_id):          # a resumed run skips what is already on disk
            continue
        for step, state_text in enumerate(my_loop(task)):
            obs = Observation(episode_id, "my-env", task.id, step, state_text, horizon=task.max_steps)
            if rec.should_intervene(obs):        # a random draw with the episode's p, within the budget
                action, actor = ask_expert(obs), "strong"
            else:
                action, actor = my_agent(obs), "base"
            rec.log(obs, action, actor, reward=step_reward)
        rec.end_episode(success, episode_id)     # episode_id may be left out: this thread's episode
    rec.close()                                  # writes what end_episode has not written yet

The folder then holds the shards ``collect-offline-trajectories`` writes (``trajectories.shards``,
validated, atomic), with ``manifest.json``: ``helpgate prm train --data trajectories`` and every
later stage run on it unchanged.

- Exploration: each episode uses one p of ``explore_p`` (a keyed draw on its id), and
  ``should_intervene`` says yes with probability p while the episode has budget left; the draw is
  a pure function of ``(seed, episode_id, step)``, as in ``agile.rollout.run_episodes``, and the
  budget is counted as there too (``agile.budget.EpisodeBudget``).
- An intervention the caller makes on its own (``log`` with an actor other than ``base`` after no
  ``should_intervene`` yes) counts against the budget too; past the budget it is refused, and so
  is logging ``base`` after a yes, so every row's ``intervened`` and ``budget_left`` are true.
- Steps are logged 0, 1, 2, ... in order, once each; ``end_episode`` marks the last one ``done``
  and writes ``success`` on every row.
- Finished: ``close`` marks the folder complete (its ``manifest.json``); until then, later stages
  refuse it as an unfinished collection unless told ``--allow-incomplete``.
- Crash safety: an episode's rows stay in memory until it ends; every ``episodes_per_shard``
  finished episodes become one shard (temp file + rename) and the manifest lists it. A killed
  process loses only episodes that were not yet written (by default: the unfinished ones). A new
  ``Recorder`` on the same folder (same ``explore_p``, ``budget``, ``seed``) continues the shard
  numbering, and ``is_recorded`` lists the episodes already on disk; logging one again is refused.
- Thread-safe: many episodes may be recorded at once from many threads (one lock).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agile.budget import EpisodeBudget
from agile.protocol import BASE, Observation
from agile.seeding import stable_uniform
from trajectories.manifest import Manifest
from trajectories.rows import StepRecord, frame_of
from trajectories.shards import read_trajectories, write_shard

OPTIONAL_COLUMNS = ("horizon", "features")
"""The optional columns a recorded shard has (no proposals: the caller's agent makes none we see)."""
SHARD = re.compile(r"^shard-(\d{5})\.parquet$")


@dataclass
class _Episode:
    """An episode being recorded: its exploration p, pending decisions and rows."""

    p: float
    decisions: dict[int, tuple[bool, int]] = field(default_factory=dict)
    """step -> (should_intervene's answer, budget left before it)."""
    rows: list[StepRecord] = field(default_factory=list)


class Recorder:
    """Decides exploratory interventions for a live agent and writes its decisions as shards."""

    def __init__(self, out_dir: str | Path, explore_p: list[float] | float = (0.0, 0.1, 0.3, 0.5),
                 budget: int = 2, seed: int = 0, episodes_per_shard: int = 1):
        ps = [float(explore_p)] if isinstance(explore_p, (int, float)) else [float(p) for p in explore_p]
        if not ps or any(not 0.0 <= p <= 1.0 for p in ps):
            raise ValueError(f"explore_p must be one or more values in [0, 1], got {explore_p}.")
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}.")
        if episodes_per_shard < 1:
            raise ValueError(f"episodes_per_shard must be >= 1, got {episodes_per_shard}.")
        self.out = Path(out_dir)
        self.explore_p, self.budget, self.seed = ps, int(budget), int(seed)
        self.episodes_per_shard = episodes_per_shard
        identity = {"writer": "helper.data.recorder.Recorder", "explore_p": ps, "budget": self.budget, "seed": self.seed}
        self._manifest = Manifest.open(self.out, identity)
        self._clean()
        self._recorded: set[str] = set()
        if self._manifest.shards:
            # A folder being recorded into is unfinished by nature (``close`` marks it complete).
            self._recorded = set(read_trajectories(self.out, allow_incomplete=True)["episode_id"].unique().to_list())
        self._next_shard = 1 + max((int(SHARD.match(n).group(1)) for n in self._manifest.shards if SHARD.match(n)),
                                   default=-1)
        self._episodes_written = sum(entry["count"] for entry in self._manifest.shards.values())
        self._open: dict[str, _Episode] = {}
        self._budget = EpisodeBudget(self.budget, owner="Recorder", end_call="end_episode(success, episode_id)")
        self._finished: list[list[dict]] = []
        self._lock = threading.RLock()
        self._thread = threading.local()

    def _clean(self) -> None:
        """Remove what a killed writer left: temp files, and a shard renamed but never listed."""
        for stale in self.out.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        for path in self.out.glob("shard-*.parquet"):
            if path.name not in self._manifest.shards:
                path.unlink()

    # -- queries ---------------------------------------------------------------------------------
    def is_recorded(self, episode_id: str) -> bool:
        """Whether the episode has ended (written, or waiting for its shard) and must not be logged again."""
        with self._lock:
            return episode_id in self._recorded

    @property
    def recorded(self) -> set[str]:
        """Ids of the episodes that have ended, including those read back from the folder on resume."""
        with self._lock:
            return set(self._recorded)

    def budget_left(self, episode_id: str) -> int:
        """Interventions still allowed in the episode."""
        return self._budget.left(episode_id)

    # -- recording -------------------------------------------------------------------------------
    def _episode(self, observation: Observation) -> _Episode:
        if not isinstance(observation, Observation):
            raise TypeError(f"expected an agile.protocol.Observation, got {type(observation).__name__}.")
        episode_id = observation.episode_id
        self._thread.episode_id = episode_id
        state = self._open.get(episode_id)
        if state is None:
            if episode_id in self._recorded:
                raise ValueError(f"episode {episode_id!r} is already recorded in {self.out}; give every episode its "
                                 "own id, and skip recorded ones (Recorder.is_recorded) when resuming.")
            p = self.explore_p[int(stable_uniform(self.seed, episode_id, "explore_p") * len(self.explore_p))]
            state = self._open[episode_id] = _Episode(p=p)
        return state

    def should_intervene(self, observation: Observation) -> bool:
        """Whether to hand this decision to the expert: Bernoulli(p) while the budget lasts.

        Asking twice for the same step gives the same answer and spends the budget once."""
        with self._lock:
            state = self._episode(observation)
            step = int(observation.step)
            if step not in state.decisions:
                draw = stable_uniform(self.seed, observation.episode_id, step, "explore")
                left = self._budget.left(observation.episode_id)
                yes = left > 0 and draw < state.p and self._budget.spend(observation.episode_id)
                state.decisions[step] = (yes, left)
            return state.decisions[step][0]

    def log(self, observation: Observation, action_text: str, actor: str = BASE, reward: float = 0.0) -> None:
        """Record what was done at this decision: the action's text, who acted, the step's reward."""
        with self._lock:
            state = self._episode(observation)
            step = int(observation.step)
            where = f"episode {observation.episode_id!r} step {step}"
            if step != len(state.rows):
                raise ValueError(f"{where}: expected step {len(state.rows)}; log each step once, in order 0, 1, 2, ...")
            asked, before = state.decisions.get(step, (False, self._budget.left(observation.episode_id)))
            if asked and actor == BASE:
                raise ValueError(f"{where}: should_intervene said yes, but the action is logged as actor 'base'; "
                                 "log the intervention's actor ('strong' or 'human').")
            intervened = asked or actor != BASE
            # The caller's own intervention also spends the budget (a refused log changes nothing).
            if intervened and not asked and not self._budget.spend(observation.episode_id):
                raise ValueError(f"{where}: actor {actor!r} intervenes, but the budget of {self.budget} "
                                 "interventions is spent.")
            state.decisions.pop(step, None)
            state.rows.append(StepRecord.of(observation, action_text, actor, intervened, before, reward, False,
                                            state.p, self.seed))

    def end_episode(self, success: float, episode_id: str | None = None) -> None:
        """Close the episode with its outcome (default: the episode this thread logged last)."""
        with self._lock:
            episode_id = episode_id if episode_id is not None else getattr(self._thread, "episode_id", None)
            if episode_id is None or episode_id not in self._open:
                raise ValueError(f"end_episode: no open episode {episode_id!r}; log at least one step first "
                                 f"(open: {sorted(self._open)[:5]}).")
            state = self._open.pop(episode_id)
            self._budget.end(episode_id)
            if not state.rows:
                raise ValueError(f"end_episode: episode {episode_id!r} has no logged step.")
            state.rows[-1].done = True
            for row in state.rows:
                row.success = float(success)
            self._recorded.add(episode_id)
            self._finished.append(state.rows)
            if len(self._finished) >= self.episodes_per_shard:
                self.flush()

    def flush(self) -> None:
        """Write every ended, unwritten episode as one shard, then list it in the manifest."""
        with self._lock:
            if not self._finished:
                return
            frame = frame_of((row for episode in self._finished for row in episode), OPTIONAL_COLUMNS)
            name = f"shard-{self._next_shard:05d}.parquet"
            write_shard(frame, self.out / name)
            self._manifest.complete = False  # recording goes on: unfinished until close()
            self._manifest.mark_done(name, first=self._episodes_written, count=len(self._finished), rows=frame.height)
            self._next_shard += 1
            self._episodes_written += len(self._finished)
            self._finished = []

    def close(self) -> None:
        """Write what has ended, and mark the folder a finished collection (``manifest.json`` complete:
        true, what ``prm train`` and every later stage require); episodes still open are not written
        (they have no outcome). A killed recorder's folder stays unfinished until a new one is closed."""
        with self._lock:
            self.flush()
            self._manifest.finish()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
