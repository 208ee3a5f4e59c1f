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

Several kinds of help, each at its price::

    rec = Recorder("trajectories", budget=6, helps={"compute": 1, "stronger": 2, "human": 4}, caps={"human": 1})
    kind = rec.should_intervene(obs)             # a kind's name the budget and caps allow, or "" (falsy)
    if kind:
        rec.log(obs, ask(kind, obs), "strong", kind=kind)           # cost: the kind's price unless given
    else:
        rec.log(obs, my_agent(obs), "base")

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
- Kinds (``helps``): rows carry ``help_kind`` and ``help_cost`` and the manifest the kinds, prices and caps
  (``trajectories.helps``); ``budget`` is a cost per episode, counted by the one priced count
  (``agile.tiered_budget.TieredBudget``). ``should_intervene`` draws the kind among those still affordable
  (``agile.helps.draw_kind``, weighted by ``weights``), as the episode loop does; ``log`` spends the kind's
  price and writes the call's cost (``cost=``, from 0 up to the price: a metered call; default the price), and
  refuses a call past the budget or a cap, a kind not among ``helps``, or an intervention logged with no kind.
  Without ``helps``, ``kind`` and ``cost`` are refused: the folder is one kind's.
- Thread-safe: many episodes may be recorded at once from many threads (one lock).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agile.budget import EpisodeBudget
from agile.helps import Help, as_helps, draw_kind, prices_and_caps
from agile.protocol import BASE, Observation
from agile.seeding import stable_uniform
from agile.tiered_budget import TieredBudget
from trajectories.helps import HelpKind
from trajectories.manifest import Manifest
from trajectories.rows import StepRecord, frame_of
from trajectories.schema import HELP_COLUMNS
from trajectories.shards import read_trajectories, write_shard

OPTIONAL_COLUMNS = ("horizon", "features")
"""The optional columns a recorded shard has (no proposals: the caller's agent makes none we see)."""
SHARD = re.compile(r"^shard-(\d{5})\.parquet$")


@dataclass
class _Episode:
    """An episode being recorded: its exploration p, pending decisions and rows."""

    p: float
    decisions: dict[int, tuple[bool | str, int]] = field(default_factory=dict)
    """step -> (should_intervene's answer: with kinds the kind's name or "", budget left before it)."""
    rows: list[StepRecord] = field(default_factory=list)


class Recorder:
    """Decides exploratory interventions for a live agent and writes its decisions as shards."""

    def __init__(self, out_dir: str | Path, explore_p: list[float] | float = (0.0, 0.1, 0.3, 0.5),
                 budget: float = 2, seed: int = 0, episodes_per_shard: int = 1, helps: dict[str, float] | None = None,
                 caps: dict[str, int] | None = None, weights: dict[str, float] | None = None):
        ps = [float(explore_p)] if isinstance(explore_p, (int, float)) else [float(p) for p in explore_p]
        if not ps or any(not 0.0 <= p <= 1.0 for p in ps):
            raise ValueError(f"explore_p must be one or more values in [0, 1], got {explore_p}.")
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}.")
        if episodes_per_shard < 1:
            raise ValueError(f"episodes_per_shard must be >= 1, got {episodes_per_shard}.")
        self.out = Path(out_dir)
        self.helps = self._kinds(helps, caps or {}, weights or {})
        whole = float(budget).is_integer() or not self.helps  # a cost budget may be a fraction, a count may not
        self.explore_p, self.budget, self.seed = ps, int(budget) if whole else float(budget), int(seed)
        self.episodes_per_shard = episodes_per_shard
        identity = {"writer": "helper.data.recorder.Recorder", "explore_p": ps, "budget": self.budget, "seed": self.seed}
        if self.helps:  # the kinds are the folder's identity too, and what its readers take them from
            identity["helps"] = [HelpKind(h.name, h.price, h.cap, h.weight).as_entry() for h in self.helps]
        prices, caps = prices_and_caps(self.helps)
        self._spend = (TieredBudget(prices, self.budget, caps, owner="Recorder",
                                    end_call="end_episode(success, episode_id)") if self.helps else None)
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

    @staticmethod
    def _kinds(helps, caps: dict, weights: dict) -> tuple[Help, ...]:
        if helps is None:
            if caps or weights:
                raise ValueError("Recorder: caps and weights are of kinds of help; give helps={kind: price, ...}.")
            return ()
        if not isinstance(helps, dict):
            raise TypeError(f"Recorder: helps={helps!r} must be a dict of kind name to price.")
        strange = sorted((set(caps) | set(weights)) - set(helps))
        if strange:
            raise ValueError(f"Recorder: caps or weights name {strange[0]!r}, not among helps {sorted(helps)}.")
        return as_helps([Help(str(name), None, price, caps.get(name), weights.get(name, 1.0))
                         for name, price in helps.items()])

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

    def budget_left(self, episode_id: str) -> float:
        """Interventions still allowed in the episode (with kinds: the cost still allowed)."""
        with self._lock:
            return self._budget.left(episode_id) if self._spend is None else float(self._spend.left(episode_id))

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

    def should_intervene(self, observation: Observation) -> bool | str:
        """Whether to hand this decision to the expert: Bernoulli(p) while the budget lasts. With kinds, the name of
        the kind to call (drawn among those the budget and caps allow), or "" for the agent.

        Asking twice for the same step gives the same answer and spends the budget once (with kinds: when logged)."""
        with self._lock:
            state = self._episode(observation)
            step = int(observation.step)
            if step not in state.decisions and self._spend is not None:
                allowed = self._spend.affordable(observation.episode_id)
                affordable = [h for h in self.helps if h.name in allowed]
                kind = ""
                if affordable and stable_uniform(self.seed, observation.episode_id, step, "explore") < state.p:
                    kind = draw_kind(affordable, stable_uniform(self.seed, observation.episode_id, step, "kind")).name
                state.decisions[step] = (kind, int(self._spend.left(observation.episode_id)))
            if step not in state.decisions:
                draw = stable_uniform(self.seed, observation.episode_id, step, "explore")
                left = self._budget.left(observation.episode_id)
                yes = left > 0 and draw < state.p and self._budget.spend(observation.episode_id)
                state.decisions[step] = (yes, left)
            return state.decisions[step][0]

    def log(self, observation: Observation, action_text: str, actor: str = BASE, reward: float = 0.0,
            kind: str = "", cost: float | None = None) -> None:
        """Record what was done at this decision: the action's text, who acted, the step's reward; with kinds of help,
        the kind called (default: the one ``should_intervene`` named) and its cost (default: its price)."""
        with self._lock:
            state = self._episode(observation)
            step = int(observation.step)
            where = f"episode {observation.episode_id!r} step {step}"
            if step != len(state.rows):
                raise ValueError(f"{where}: expected step {len(state.rows)}; log each step once, in order 0, 1, 2, ...")
            if self._spend is not None:
                return self._log_kind(observation, state, action_text, actor, reward, kind, cost, where)
            if kind or cost is not None:
                raise ValueError(f"{where}: kind={kind!r}, cost={cost!r} given, but this Recorder records one kind of "
                                 "help; construct it with helps={kind: price, ...} to record several.")
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

    def _log_kind(self, observation, state: _Episode, action_text, actor, reward, kind, cost, where) -> None:
        """``log`` with kinds: the call's kind checked against the draw, its cost spent (see the module docstring)."""
        key, step = observation.episode_id, int(observation.step)
        drawn, before = state.decisions.get(step, ("", int(self._spend.left(key))))
        kind = kind or drawn
        if drawn and kind != drawn:
            raise ValueError(f"{where}: should_intervene named {drawn!r}, but the call is logged as {kind!r}; log the "
                             "kind that was called.")
        if drawn and actor == BASE:
            raise ValueError(f"{where}: should_intervene named {drawn!r}, but the action is logged as actor 'base'; "
                             "log the intervention's actor ('strong' or 'human').")
        if (actor != BASE) != bool(kind):
            raise ValueError(f"{where}: actor {actor!r} with kind {kind!r}; an intervention names the kind it called, "
                             "the agent's own action none.")
        if not kind and cost not in (None, 0, 0.0):
            raise ValueError(f"{where}: cost={cost!r} on the agent's own action; only a call of help costs.")
        help = next((h for h in self.helps if h.name == kind), None) if kind else None
        if kind and help is None:
            raise ValueError(f"{where}: kind {kind!r} is not among this Recorder's helps "
                             f"{[h.name for h in self.helps]}.")
        if help is not None and cost is not None and not 0 <= cost <= help.price:
            # The count spends the price, so a cost above it could pass the budget unseen.
            raise ValueError(f"{where}: cost={cost!r} for {kind!r}; a call costs from 0 up to its kind's price "
                             f"({help.price:g}), which the budget counts: raise the price to log dearer calls.")
        if help is not None and not self._spend.spend(key, help.name):  # refused: nothing is logged
            raise ValueError(f"{where}: {kind!r} costs {help.price:g} with {self._spend.left(key):g} of the budget "
                             f"{self.budget} left and {self._spend.calls(key).get(kind, 0)} of its cap of {help.cap} "
                             "calls made: past the budget or the cap.")
        state.decisions.pop(step, None)
        paid = 0.0 if help is None else float(help.price if cost is None else cost)
        state.rows.append(StepRecord.of(observation, action_text, actor, help is not None, before, reward, False,
                                        state.p, self.seed, kind=kind, cost=paid))

    def end_episode(self, success: float, episode_id: str | None = None) -> None:
        """Close the episode with its outcome (default: the episode this thread logged last)."""
        with self._lock:
            episode_id = episode_id if episode_id is not None else getattr(self._thread, "episode_id", None)
            if episode_id is None or episode_id not in self._open:
                raise ValueError(f"end_episode: no open episode {episode_id!r}; log at least one step first "
                                 f"(open: {sorted(self._open)[:5]}).")
            state = self._open.pop(episode_id)
            self._budget.end(episode_id)
            if self._spend is not None:
                self._spend.end(episode_id)
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
            optional = OPTIONAL_COLUMNS + (HELP_COLUMNS if self.helps else ())
            frame = frame_of((row for episode in self._finished for row in episode), optional)
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
