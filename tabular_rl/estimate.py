"""Count-based model estimation: P(s' | step, s, a), mean reward, start distribution.

A transition is split into "does the episode end here?" and "where does it go if not?", because
the two pool differently over steps. Ending is a property of the step as much as of the state (a
fixed horizon ends every episode at its last step and none before), so it backs off to the step's
own end rate scaled by how much more often the (state, action) ends than its steps predict (a
proportional-hazards prior: observed over expected ends); where the episode goes next backs off
to the same (state, action) pooled over steps:

    hazard_t              = (E_t + smoothing * E / N) / (N_t + smoothing)           (per step)
    risk(s, a)            = (E(s, a) + smoothing) / (sum_t N_t(s, a) hazard_t + smoothing)
    q_t(s, a)             = (E_t(s, a) + backoff * min(1, hazard_t risk(s, a))) / (N_t(s, a) + backoff)
    pooled(s' | s, a)     = (M(s, a, s') + smoothing) / (M(s, a) + smoothing * S)
    C_t(s' | s, a)        = (M_t(s, a, s') + backoff * pooled(s' | s, a)) / (M_t(s, a) + backoff)
    P_t(s' | s, a)        = (1 - q_t(s, a)) * C_t(s' | s, a),   P_t(end | s, a) = q_t(s, a)

with ``E`` counting rows that end the episode and ``M`` rows that continue (subscript t: at that
step; no subscript: over all steps). Pooling the end outcome over steps instead would leak the
last step's certain end into every earlier step and make the solver spend its budget early.
Rewards (and the success credit) split the same way: a (step, state, action)'s expected reward is

    r_t(s, a) = P_t(end | s, a) * mean reward of its ending rows + (1 - P_t(end | s, a)) * that of its other rows

each mean shrunk per step towards the (state, action) mean over steps of rows of the same kind, which shrinks
towards the action's global mean of that kind with weight ``smoothing``. A credit paid only when an episode ends
(TextWorld's win, a plug-in's success) then reaches a step only as often as the model ends episodes there, so a
policy's expected success is a probability: pooling all rows over steps instead let a step that never ends an
episode borrow the last step's credit, and expected successes above 1 (1.06 to 1.64) came out of the solve.

``backoff="auto"`` picks the weight from the data (empirical Bayes, one-way random-effects
moments): the within-cell variance over the variance of the per-step means around the pooled
mean, separately for rewards and for next states. Steps that behave alike give a large weight
(pool), steps that differ give a small one. The start distribution is the empirical distribution
of states at step 0.

Every count is one ``np.bincount`` over flat indices: no Python loop over rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .discretize import Discretizer
from .transitions import ACTION_NAMES, DEFAULT_COLUMNS, Columns, Transitions, extract_transitions, with_objective

COLLECT_HINT = "collect-offline-trajectories --explore-p 0.1 0.3 0.5"


class MissingActionError(ValueError):
    """The logged data never takes one of the two actions, so its effect cannot be estimated."""


def check_tables(rewards: np.ndarray, transitions: np.ndarray, start: np.ndarray, n_actions: int) -> None:
    """Refuse tables of the wrong shape or that are not distributions (the two-action and the tiered model)."""
    T, S = rewards.shape[:2]
    if rewards.shape != (T, S, n_actions):
        raise ValueError(f"rewards has shape {rewards.shape}; expected {(T, S, n_actions)} ({n_actions} actions)")
    if transitions.shape != (T, S, n_actions, S + 1):
        raise ValueError(f"transitions has shape {transitions.shape}; expected {(T, S, n_actions, S + 1)}")
    if start.shape != (S,):
        raise ValueError(f"start has shape {start.shape}; expected ({S},)")
    if not np.allclose(transitions.sum(-1), 1.0, atol=1e-9):
        raise ValueError("transitions: every (step, state, action) row must sum to 1 (terminal column included)")
    if not np.isclose(start.sum(), 1.0, atol=1e-9):
        raise ValueError("start: the start distribution must sum to 1")


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
    """(S,) share of episodes starting in each state at step 0."""
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
    """Weight of the step-pooled estimate in the per-step rewards (the chosen one under "auto")."""
    transition_backoff: float = 0.0
    """Weight of the step-pooled estimate in the per-step transitions."""
    n_truncated: int = 0
    """Rows that were not done but had no next row, treated as terminal."""
    entries: np.ndarray | None = None
    """(T, S) share of episodes whose first decision is at step t > 0 in each state (row 0 is zero): episodes
    aligned at their ends (``tabular_rl.aligned``) start where their horizon is shorter; with ``start`` it sums to 1."""

    def __post_init__(self) -> None:
        entered = self.start if self.entries is None else self.start + self.entries.sum(0)
        check_tables(self.rewards, self.transitions, entered, n_actions=2)
        if self.entries is not None and self.entries.shape != self.rewards.shape[:2]:
            raise ValueError(f"entries has shape {self.entries.shape}; expected {self.rewards.shape[:2]}")

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


MAX_POOLING_WEIGHT = 1e6
"""``auto`` weight when the per-step means vary no more than sampling noise: pool completely."""


def pooling_weight(sums: np.ndarray, squares: np.ndarray, counts: np.ndarray) -> float:
    """Empirical-Bayes weight of the step-pooled mean in a per-step mean, shared by all cells.

    ``sums`` (T, S, A, D) are per-cell sums of D-dimensional outcomes, ``squares`` (T, S, A) the
    per-cell sums of their squared norms, ``counts`` (T, S, A) the rows. With groups g = (s, a)
    and their per-step cells, the one-way random-effects moments are

        MSW = sum of within-cell squared deviations / (N - cells)
        MSB = sum_cells n (mean_cell - mean_group)^2 / (cells - groups)
        n0  = sum_g (N_g - sum_t n_t^2 / N_g) / (cells - groups)
        tau^2 = max(0, (MSB - MSW) / n0),   weight = MSW / tau^2

    so a cell's estimate is (n * its mean + weight * pooled mean) / (n + weight), the posterior
    mean under a normal prior on how per-step means scatter around the pooled one.
    """
    counts = counts.astype(float)
    seen = counts > 0
    group_n = counts.sum(0)
    groups = (group_n > 0).sum()
    cells = seen.sum()
    safe = np.where(seen, counts, 1.0)[..., None]
    cell_mean = sums / safe
    group_mean = sums.sum(0) / np.where(group_n > 0, group_n, 1.0)[..., None]
    within = float((squares - (sums**2).sum(-1) / safe[..., 0])[seen].sum())
    between = float((counts * ((cell_mean - group_mean) ** 2).sum(-1))[seen].sum())
    df_within, df_between = counts.sum() - cells, cells - groups
    if df_within <= 0 or df_between <= 0:
        return MAX_POOLING_WEIGHT if df_between <= 0 else 0.0
    ms_within, ms_between = within / df_within, between / df_between
    n0 = float((group_n - (counts**2).sum(0) / np.where(group_n > 0, group_n, 1.0))[group_n > 0].sum()) / df_between
    tau2 = (ms_between - ms_within) / n0
    if tau2 <= ms_within / MAX_POOLING_WEIGHT:
        return MAX_POOLING_WEIGHT
    return ms_within / tau2


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
    backoff: float | str = "auto",
    discretizer: Discretizer | None = None,
    action_column: str = "intervened",
) -> TabularModel:
    """Counts and smoothed estimates from flat transition arrays (see module docstring)."""
    check_estimator_weights(smoothing, backoff)
    if not np.isin(tr.action, (0, 1)).all():
        raise ValueError(f"column {action_column!r} must be boolean (0 = base, 1 = intervene)")
    _check_actions(tr.action, action_column)
    tables = estimate_tables(tr, n_actions=2, smoothing=smoothing, backoff=backoff)
    return TabularModel(**tables, discretizer=discretizer, smoothing=float(smoothing), n_truncated=tr.n_truncated)


def check_estimator_weights(smoothing: float, backoff: float | str) -> None:
    if backoff != "auto" and not (isinstance(backoff, (int, float)) and backoff >= 0):
        raise ValueError(f"backoff={backoff!r}: use a weight >= 0 or 'auto' (chosen from the data)")
    if smoothing < 0:
        raise ValueError(f"smoothing={smoothing}: must be >= 0")


def estimate_tables(tr: Transitions, *, n_actions: int, smoothing: float, backoff: float | str) -> dict:
    """The estimator's arrays for actions ``0 .. n_actions - 1`` (``tr.action`` already checked to lie there).

    Shared by the two-action model (``estimate_from_transitions``) and the tiered one
    (``tabular_rl.tiered``, one action per kind of help): every formula of the module docstring is
    per (step, state, action) or per action, so nothing in it depends on there being two."""
    A = int(n_actions)
    T, S = tr.horizon, tr.n_states
    sa = (tr.step * S + tr.state) * A + tr.action
    next_counts = np.bincount(sa * (S + 1) + tr.next_state, minlength=T * S * A * (S + 1)).reshape(T, S, A, S + 1)
    counts = next_counts.sum(-1)

    ends, moves = next_counts[..., S], next_counts[..., :S]
    step_ends, step_rows = ends.sum((1, 2)), counts.sum((1, 2))
    hazard = _shrink(step_ends, step_rows, step_ends.sum() / step_rows.sum(), smoothing)
    # Proportional hazards: a (state, action) ends more or less often than its steps' rates predict.
    # Every row of the last step ends (the horizon), so its ends say nothing about a (state,
    # action)'s risk of ending early: counted in, they pull every action that never ends early
    # (an intervention that makes a step safe) towards the average risk.
    early = slice(0, T - 1)
    expected_ends = (counts * hazard[:, None, None])[early].sum(0)
    risk = _shrink(ends[early].sum(0), expected_ends, 1.0, smoothing)
    end_prior = np.minimum(1.0, hazard[:, None, None] * risk)
    move_counts = moves.sum(-1)
    pooled_moves = _shrink(moves.sum(0), move_counts.sum(0)[..., None], 1.0 / S, smoothing * S)

    reward_sums = np.bincount(sa, weights=tr.reward, minlength=T * S * A).reshape(T, S, A)
    if backoff == "auto":
        reward_squares = np.bincount(sa, weights=tr.reward**2, minlength=T * S * A).reshape(T, S, A)
        move_weight = pooling_weight(moves, move_counts, move_counts)
        reward_weight = pooling_weight(reward_sums[..., None], reward_squares, counts)
    else:
        move_weight = reward_weight = float(backoff)

    end_p = _shrink(ends, counts, end_prior, move_weight)
    move_p = _shrink(moves, move_counts[..., None], pooled_moves, move_weight)
    transitions = np.concatenate([(1.0 - end_p)[..., None] * move_p, end_p[..., None]], axis=-1)
    # The horizon ends every episode at the last step; data cannot say otherwise (no step T rows).
    transitions[-1] = 0.0
    transitions[-1, ..., S] = 1.0

    ending = tr.next_state == S
    end_p_final = transitions[..., S]

    def mean_by_outcome(values: np.ndarray, weight: float) -> np.ndarray:
        """Expected ``values`` per (step, state, action) as end share x mean over ending rows + the rest x mean
        over continuing rows (module docstring: a credit paid at the end never leaks into earlier steps)."""
        table = np.zeros((T, S, A))
        for part, rows_of_part, share in ((ending, ends, end_p_final), (~ending, move_counts, 1.0 - end_p_final)):
            sums = np.bincount(sa, weights=values * part, minlength=T * S * A).reshape(T, S, A)
            n_rows = np.bincount(tr.action[part], minlength=A)
            total = sums.sum((0, 1))
            overall = total.sum() / max(n_rows.sum(), 1)
            global_mean = np.where(n_rows > 0, total / np.maximum(n_rows, 1), overall)
            pooled = _shrink(sums.sum(0), rows_of_part.sum(0), global_mean, smoothing)
            table += share * _shrink(sums, rows_of_part, pooled, weight)
        return table

    first = tr.step == 0 if tr.first is None else tr.first
    if not first.any():
        raise ValueError("no row has step == 0: the start distribution is estimated from step-0 rows")
    start = np.bincount(tr.state[first & (tr.step == 0)], minlength=S) / first.sum()
    later = first & (tr.step > 0)
    entries = None
    if later.any():  # episodes aligned at their ends enter where their horizon is shorter (tabular_rl.aligned)
        entries = np.bincount(tr.step[later] * S + tr.state[later], minlength=T * S).reshape(T, S) / first.sum()
    return {
        "transitions": transitions,
        "rewards": mean_by_outcome(tr.reward, reward_weight),
        "start": start,
        "entries": entries,
        "success": None if tr.success is None else mean_by_outcome(tr.success, reward_weight),
        "counts": counts,
        "next_counts": next_counts,
        "backoff": float(reward_weight),
        "transition_backoff": float(move_weight),
    }


def estimate(
    df: pl.DataFrame,
    discretizer: Discretizer,
    *,
    columns: Columns = DEFAULT_COLUMNS,
    smoothing: float = 1.0,
    backoff: float | str = "auto",
    objective: str = "reward",
    shaping: float = 0.0,
) -> TabularModel:
    """Estimate the MDP from a scored dataset (one row per decision point) and a fitted discretizer.

    The reward is the logged ``columns.reward`` (``objective="reward"``) or the episode's success
    credit plus ``shaping`` times it (``objective="success"``, ``tabular_rl.transitions``);
    ``columns.success`` (optional) is tracked so the solvers can report expected success. Raises
    ``MissingActionError`` if either action never occurs.
    """
    if not discretizer.is_fitted:
        raise ValueError("discretizer is not fitted: call discretizer.fit(df['prm_score'], df['step']) first")
    tr = with_objective(extract_transitions(df, discretizer, columns), objective, shaping)
    return estimate_from_transitions(
        tr, smoothing=smoothing, backoff=backoff, discretizer=discretizer, action_column=columns.action
    )
