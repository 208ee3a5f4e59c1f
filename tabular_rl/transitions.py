"""Logged rows -> flat transition arrays (step, state, action, next state, reward).

One row of the offline dataset is one decision point. Its next state is the state of the row
with ``step + 1`` in the same episode; a row with ``done`` true has none (terminal). A row that is
not done but has no ``step + 1`` row (a truncated episode) is treated as terminal too and counted
in ``Transitions.n_truncated``. A done row that nevertheless has a ``step + 1`` row is an error.

The ``success`` column, when present, is credited to rows so that an episode's credits add up to
its success. Where every episode's success is the mean of its rewards (ProductQA: the share of
questions answered right), each row is credited its reward over the episode's length, so expected
success follows the policy's own choices at every step. Otherwise (TextWorld: won or not) success
is credited once, at the episode's last row.

The MDP reward is chosen by ``objective`` (``with_objective``): ``"reward"``, the logged
``reward`` column (an episode's return is its total reward: TextWorld's progress), or
``"success"``, the success credit plus ``shaping`` times the logged reward, so that the solver
maximises what is scored (the probability of winning) and progress only breaks ties or guides it
as much as asked. Where success is the mean reward both give the same policy.

Linking rows to their successors is O(n) when the rows of each episode are contiguous with
increasing steps (how shards are written); otherwise the rows are sorted by (episode, step) first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from .columns import DEFAULT_COLUMNS, Columns
from .discretize import Discretizer

BASE, INTERVENE = 0, 1
OBJECTIVES = ("success", "reward")
ACTION_NAMES = ("base", "intervene")


@dataclass
class Transitions:
    """Flat arrays, one entry per logged row; ``next_state == n_states`` means terminal."""

    step: np.ndarray
    state: np.ndarray
    action: np.ndarray
    next_state: np.ndarray
    reward: np.ndarray
    success: np.ndarray | None
    n_states: int
    n_truncated: int = 0
    first: np.ndarray | None = None
    """Whether each row is its episode's first (an episode aligned at its end starts past step 0)."""

    @property
    def horizon(self) -> int:
        return int(self.step.max()) + 1

    def __len__(self) -> int:
        return int(self.step.shape[0])


def _require(df: pl.DataFrame, names: list[str], nullable: str) -> None:
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise ValueError(
            f"dataset is missing column(s) {missing}; it has {df.columns}. "
            "Pass Columns(...) with the right names, or score the shards first (helpgate prm score) for prm_score."
        )
    for c in names:
        if c != nullable and df[c].null_count():
            raise ValueError(f"column {c!r} has {df[c].null_count()} null value(s); only {nullable!r} may be missing")


def _successor(episode: pl.Series, step: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(row order or None if already grouped, has_next mask in that order)."""
    order = None
    same = (episode.slice(1) == episode.slice(0, len(episode) - 1)).to_numpy()
    grouped = bool(np.all(step[1:][same] > step[:-1][same]))
    if grouped:
        # Contiguous runs with increasing steps are episodes only if no episode id comes back later:
        # the ids at the run starts must be distinct.
        starts = np.flatnonzero(np.concatenate([[True], ~same]))
        grouped = episode.gather(starts).n_unique() == starts.size
    if not grouped:
        order = pl.DataFrame({"e": episode, "s": step}).select(pl.arg_sort_by(["e", "s"])).to_series().to_numpy()
        episode, step = episode.gather(order), step[order]
        same = (episode.slice(1) == episode.slice(0, len(episode) - 1)).to_numpy()
    dup = same & (step[1:] == step[:-1])
    if dup.any():
        i = int(np.argmax(dup))
        raise ValueError(
            f"episode_id={episode[i]!r} has two rows with step={step[i]}; each (episode, step) must be unique"
        )
    has_next = np.zeros(step.shape[0], dtype=bool)
    has_next[:-1] = same & (step[1:] == step[:-1] + 1)
    return order, has_next


def extract_transitions(df: pl.DataFrame, discretizer: Discretizer, columns: Columns = DEFAULT_COLUMNS) -> Transitions:
    """Discretize every row and link it to its successor. Never loops over rows in Python."""
    c = columns
    needed = [c.episode, c.step, c.action, c.reward, c.done, c.score]
    _require(df, needed, nullable=c.score)
    if df.height == 0:
        raise ValueError("dataset has no rows")
    step = df[c.step].cast(pl.Int64).to_numpy()
    if step.min() < 0:
        raise ValueError(f"column {c.step!r} has negative values (min {step.min()}); steps are 0-based")
    order, has_next = _successor(df[c.episode], step)

    def col(name, dtype):
        a = df[name].cast(dtype).to_numpy()
        return a if order is None else a[order]

    if order is not None:
        step = step[order]
    score = col(c.score, pl.Float64)
    action = col(c.action, pl.Int8).astype(np.int64)
    reward = col(c.reward, pl.Float64)
    done = col(c.done, pl.Boolean)
    if np.isnan(reward).any():
        raise ValueError(f"column {c.reward!r} has NaN values; every decision point needs a reward")
    bad = done & has_next
    if bad.any():
        i = int(np.argmax(bad))
        ep = df[c.episode][i] if order is None else df[c.episode][int(order[i])]
        raise ValueError(
            f"episode_id={ep!r} has done=True at step={step[i]} but also a row at step={step[i] + 1}; "
            "fix the shard (done marks the last decision of an episode)"
        )
    state = discretizer.transform(score, step)
    n_states = discretizer.n_states
    next_state = np.empty_like(state)
    next_state[:-1] = np.where(has_next[:-1], state[1:], n_states)
    next_state[-1] = n_states
    last = ~has_next
    success = None
    if c.success is not None and c.success in df.columns:
        s = np.nan_to_num(col(c.success, pl.Float64))
        episode = np.concatenate([[0], np.cumsum(last[:-1])])
        length = np.bincount(episode)
        mean_reward = np.bincount(episode, weights=reward) / length
        if np.allclose(s, mean_reward[episode], rtol=0.0, atol=1e-9):
            success = reward / length[episode]
        else:
            success = np.where(last, s, 0.0)
    return Transitions(
        step=step,
        state=state,
        action=action,
        next_state=next_state,
        reward=reward,
        success=success,
        n_states=n_states,
        n_truncated=int((last & ~done).sum()),
        first=np.concatenate([[True], last[:-1]]),
    )


def with_objective(tr: Transitions, objective: str = "reward", shaping: float = 0.0) -> Transitions:
    """``tr`` with the reward the solver maximises (module docstring): ``reward`` or ``success``."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: choose one of {', '.join(OBJECTIVES)}")
    if not (np.isfinite(shaping) and shaping >= 0):
        raise ValueError(f"shaping={shaping!r}: the weight of the logged reward must be a finite number >= 0")
    if objective == "reward":
        return tr
    if tr.success is None:
        raise ValueError(
            "objective='success' needs the dataset's success column (the episode's outcome on every row); "
            "add it, or solve for the logged reward with objective='reward' (--objective reward)"
        )
    return replace(tr, reward=tr.success + shaping * tr.reward)
