"""Count-based model estimation: P(s' | step, s, a), mean reward, start distribution.

Estimates are per (step, state, action) and shrink towards an estimate pooled over steps where
per-step counts are thin (hierarchical Dirichlet smoothing):

    pooled(s' | s, a)  = (N(s, a, s') + smoothing) / (N(s, a) + smoothing * (S + 1))
    P_t(s' | s, a)     = (N_t(s, a, s') + backoff * pooled(s' | s, a)) / (N_t(s, a) + backoff)

``S + 1`` counts the terminal outcome as a next state. With ``N_t`` large the per-step frequency
wins; with ``N_t == 0`` the pooled estimate is used as is. Mean rewards follow the same rule,
the pooled mean shrinking towards the action's global mean reward with weight ``smoothing``.
The start distribution is the empirical distribution of states at step 0.

Every count is one ``np.bincount`` over flat indices: no Python loop over rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .discretize import Discretizer
from .transitions import ACTION_NAMES, DEFAULT_COLUMNS, Columns, Transitions, extract_transitions

COLLECT_HINT = "collect-offline-trajectories --explore-p 0.1 0.3 0.5"


class MissingActionError(ValueError):
    """The logged data never takes one of the two actions, so its effect cannot be estimated."""


@dataclass
class TabularModel:
    """A finite-horizon MDP over (step, state) with actions base=0 / intervene=1.

    ``transitions[t, s, a, s']`` has ``S + 1`` next states; index ``S`` is "episode over" (value 0).
    At the last step every transition ends the episode whatever the table says.
    """

    transitions: np.ndarray
    """(T, S, 2, S + 1) next-state probabilities, last column = terminal."""
    rewards: np.ndarray
    """(T, S, 2) expected reward of acting at (step, state)."""
    start: np.ndarray
    """(S,) distribution of the state at step 0."""
    success: np.ndarray | None = None
    """(T, S, 2) expected episode success credited at this step (it is nonzero where episodes end)."""
    counts: np.ndarray | None = None
    """(T, S, 2) logged rows per (step, state, action)."""
    next_counts: np.ndarray | None = None
    """(T, S, 2, S + 1) logged transitions, for inspection."""
    discretizer: Discretizer | None = None
    """The fitted discretizer the states come from (needed by ``label``)."""
    smoothing: float = 0.0
    backoff: float = 0.0
    n_truncated: int = 0
    """Rows that were not done but had no next row, treated as terminal."""

    def __post_init__(self) -> None:
        T, S = self.rewards.shape[:2]
        if self.rewards.shape != (T, S, 2):
            raise ValueError(f"rewards has shape {self.rewards.shape}; expected (T, S, 2)")
        if self.transitions.shape != (T, S, 2, S + 1):
            raise ValueError(f"transitions has shape {self.transitions.shape}; expected {(T, S, 2, S + 1)}")
        if self.start.shape != (S,):
            raise ValueError(f"start has shape {self.start.shape}; expected ({S},)")
        if not np.allclose(self.transitions.sum(-1), 1.0, atol=1e-9):
            raise ValueError("transitions: every (step, state, action) row must sum to 1 (terminal column included)")
        if not np.isclose(self.start.sum(), 1.0, atol=1e-9):
            raise ValueError("start: the start distribution must sum to 1")

    @property
    def horizon(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_states(self) -> int:
        return int(self.rewards.shape[1])

    def counts_frame(self) -> pl.DataFrame:
        """One row per (step, state, action): how much data backs each estimate."""
        if self.counts is None:
            raise ValueError("this model was built from tables, not data: it has no counts")
        T, S = self.horizon, self.n_states
        t, s, a = (g.ravel() for g in np.indices((T, S, 2)))
        n = self.counts.ravel()
        frame = {"step": t, "state": s}
        if self.discretizer is not None:
            score_bin, bucket = self.discretizer.split(s)
            lo, hi = self.discretizer.bin_bounds()
            frame |= {
                "score_bin": score_bin,
                "step_bucket": bucket,
                "score_lo": lo[score_bin],
                "score_hi": hi[score_bin],
            }
        pooled = np.broadcast_to(self.counts.sum(0), (T, S, 2)).ravel()
        return pl.DataFrame(
            frame
            | {
                "action": np.asarray(ACTION_NAMES)[a],
                "n": n,
                "n_pooled_over_steps": pooled,
                "reward": self.rewards.ravel(),
                "p_terminal": self.transitions[..., -1].ravel(),
            }
        )


def _check_actions(action: np.ndarray, column: str) -> None:
    n_int = int(action.sum())
    if n_int == 0:
        raise MissingActionError(
            f"no logged row has {column}=True (action 1, 'intervene'), so the effect of an intervention "
            f"cannot be estimated. Re-run collection with explore_p > 0, e.g. `{COLLECT_HINT}`."
        )
    if n_int == action.shape[0]:
        raise MissingActionError(
            f"every logged row has {column}=True: no row has {column}=False (action 0, 'base'), so the base "
            f"agent's behaviour cannot be estimated. Re-run collection with explore_p < 1, e.g. `{COLLECT_HINT}`."
        )


def _shrink(sum_t, n_t, prior, weight):
    """(sum_t + weight * prior) / (n_t + weight), falling back to the prior where both are 0."""
    den = n_t + weight
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (sum_t + weight * prior) / den
    return np.where(den > 0, out, prior)


def estimate_from_transitions(
    tr: Transitions,
    *,
    smoothing: float = 1.0,
    backoff: float = 5.0,
    discretizer: Discretizer | None = None,
    action_column: str = "intervened",
) -> TabularModel:
    """Counts and smoothed estimates from flat transition arrays (see module docstring)."""
    if smoothing < 0 or backoff < 0:
        raise ValueError(f"smoothing={smoothing}, backoff={backoff}: both must be >= 0")
    if not np.isin(tr.action, (0, 1)).all():
        raise ValueError(f"column {action_column!r} must be boolean (0 = base, 1 = intervene)")
    _check_actions(tr.action, action_column)
    T, S = tr.horizon, tr.n_states
    sa = (tr.step * S + tr.state) * 2 + tr.action
    next_counts = np.bincount(sa * (S + 1) + tr.next_state, minlength=T * S * 2 * (S + 1)).reshape(T, S, 2, S + 1)
    counts = next_counts.sum(-1)

    pooled_next = next_counts.sum(0)
    pooled_n = counts.sum(0)
    p_pooled = _shrink(pooled_next, pooled_n[..., None], 1.0 / (S + 1), smoothing * (S + 1))
    transitions = _shrink(next_counts, counts[..., None], p_pooled, backoff)
    # The horizon ends every episode at the last step; data cannot say otherwise (no step T rows),
    # but smoothing would leak mass to non-terminal states there.
    transitions[-1] = 0.0
    transitions[-1, ..., S] = 1.0

    def mean_table(values: np.ndarray) -> np.ndarray:
        sums = np.bincount(sa, weights=values, minlength=T * S * 2).reshape(T, S, 2)
        global_mean = np.bincount(tr.action, weights=values, minlength=2) / np.bincount(tr.action, minlength=2)
        pooled = _shrink(sums.sum(0), pooled_n, global_mean, smoothing)
        return _shrink(sums, counts, pooled, backoff)

    first = tr.step == 0
    if not first.any():
        raise ValueError("no row has step == 0: the start distribution is estimated from step-0 rows")
    start = np.bincount(tr.state[first], minlength=S) / first.sum()
    return TabularModel(
        transitions=transitions,
        rewards=mean_table(tr.reward),
        start=start,
        success=None if tr.success is None else mean_table(tr.success),
        counts=counts,
        next_counts=next_counts,
        discretizer=discretizer,
        smoothing=float(smoothing),
        backoff=float(backoff),
        n_truncated=tr.n_truncated,
    )


def estimate(
    df: pl.DataFrame,
    discretizer: Discretizer,
    *,
    columns: Columns = DEFAULT_COLUMNS,
    smoothing: float = 1.0,
    backoff: float = 5.0,
) -> TabularModel:
    """Estimate the MDP from a scored dataset (one row per decision point) and a fitted discretizer.

    The reward is the logged ``columns.reward``; ``columns.success`` (optional) is tracked so the
    solvers can report expected success. Raises ``MissingActionError`` if either action never occurs.
    """
    if not discretizer.is_fitted:
        raise ValueError("discretizer is not fitted: call discretizer.fit(df['prm_score'], df['step']) first")
    tr = extract_transitions(df, discretizer, columns)
    return estimate_from_transitions(
        tr, smoothing=smoothing, backoff=backoff, discretizer=discretizer, action_column=columns.action
    )
