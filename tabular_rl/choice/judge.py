"""A held-out fold's own model as the judge of policies fitted without it.

    grid = grid_of([m.edges for m in members])            # every member's score edges
    judge = judge_model(held_rows, fit_rows, grid)        # the fold's per-step empirical model
    success = judged_success(judge, grid, member.decide, budget=2)

Where a decision changes what comes next (a slip ends the river, a move changes the game), no logged episode
shows a policy's outcome, so a held-out fold is read through a model: estimated on that fold's rows alone, per
step, with no pooling across steps (whose pull toward other steps would bias the figure), each (step, state,
action) shrunk toward the training folds' estimate by ``PRIOR_ROWS`` rows, so a cell the fold never visits is
judged by the training folds instead of a uniform guess. That estimate is half their per-step model and half their
smooth model (``tabular_rl.smooth``) where the success is the objective: the per-step model alone is the one the
step tables were solved on and reads them 0.07-0.08 above their truth on the synthetic rapids, the smooth one
alone 0.02 below (``benchmarks/published/judge-prior.txt``). The judge's states are a score grid holding every
member's edges, so each member's decision is constant on each of its cells and every member is read by one
judge: a coarse member pays for what it merges in the same currency as a fine one.

Its assumption: what the score leaves out does not depend on the past actions (plain-cue's risks are drawn afresh
at every crossing); where it does, the figure is a model-based estimate, not a measurement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np
import polars as pl

from ..discretize import Discretizer
from ..estimate import TabularModel, estimate
from ..evaluate import evaluate
from ..smooth import RiskCurve, estimate_smooth, state_scores
from ..transitions import DEFAULT_COLUMNS, Columns, extract_transitions, with_objective

JUDGE_SMOOTHING = 1e-3
"""Pseudo-count of the held-out fold's empirical model before the prior below: it only keeps empty cells defined."""
SMOOTH_SHARE = 0.5
"""The smooth model's share of the prior where it is used (``benchmarks/published/judge-prior.txt``)."""
PRIOR_ROWS = 1.0
"""Rows' worth of the fitted model's estimate mixed into each (step, state, action) cell of the held-out fold's
model: a cell the fold never visits is judged by the training folds' estimate instead of a uniform guess (whose
mass on "episode over" would fine every policy that acts there), one it visits by its own rows."""


def grid_of(edge_lists: Iterable[np.ndarray]) -> Discretizer:
    """A discretizer whose edges are every finite edge of ``edge_lists`` (the unknown state kept for NaN)."""
    edges = np.unique(np.concatenate([np.asarray(e, dtype=np.float64).ravel() for e in edge_lists] or [[]]))
    edges = edges[np.isfinite(edges)]
    return Discretizer.from_dict({"kind": "helpgate.tabular_rl.Discretizer", "bins": int(edges.size) + 1,
                                  "binning": "quantile", "step_buckets": 0, "score_range": [0.0, 1.0],
                                  "edges": [float(e) for e in edges], "horizon": None})


def representatives(grid: Discretizer) -> np.ndarray:
    """One score inside each of ``grid``'s states (its lower edge; below the first edge for the first; NaN for the
    unknown state): a member whose edges are among the grid's decides the same anywhere in a state."""
    edges = np.asarray(grid.edges_, dtype=np.float64)
    if edges.size == 0:
        return np.array([0.5, np.nan])
    return np.concatenate([[np.nextafter(edges[0], -np.inf)], edges, [np.nan]])


def grid_policy(decide: Callable, grid: Discretizer, horizon: int, budget: int) -> np.ndarray:
    """(horizon, grid states, budget + 1) table of ``decide(step, score, budget_left)`` at each state's
    representative score."""
    scores = representatives(grid)
    S = scores.size
    policy = np.zeros((horizon, S, budget + 1))
    t, s, b = (a.ravel() for a in np.indices((horizon, S, budget + 1)))
    policy[t, s, b] = np.asarray(decide(t, scores[s], b), dtype=np.float64) * (b > 0)
    return policy


def judge_model(held: pl.DataFrame, fitted: pl.DataFrame, grid: Discretizer, *, columns: Columns = DEFAULT_COLUMNS,
                smoothing: float = 1.0, backoff: float | str = "auto", objective: str = "success",
                shaping: float = 0.0, curve: RiskCurve | None = None,
                smooth_weight: float = SMOOTH_SHARE) -> TabularModel:
    """The held-out rows' per-step empirical model on ``grid``, each cell shrunk toward the fitted rows' model by
    ``PRIOR_ROWS`` rows (module docstring): their per-step model, or with ``curve`` (the fitted rows' risk curve,
    ``tabular_rl.smooth``) that model mixed with their smooth model, ``smooth_weight`` of the latter. Raises
    ``MissingActionError`` where the held-out rows lack an action."""
    own = estimate(held, grid, columns=columns, smoothing=JUDGE_SMOOTHING, backoff=0.0, objective=objective,
                   shaping=shaping)
    prior = estimate(fitted, grid, columns=columns, smoothing=smoothing, backoff=backoff, objective=objective,
                     shaping=shaping)
    if curve is not None:
        transitions = with_objective(extract_transitions(fitted, grid, columns), objective, shaping)
        smooth = estimate_smooth(transitions, curve.rates(state_scores(fitted, grid, columns)), smoothing=smoothing,
                                 discretizer=grid)
        prior = mixed(prior, smooth, smooth_weight)
    return shrink_toward(own, prior)


def mixed(a: TabularModel, b: TabularModel, weight: float) -> TabularModel:
    """``(1 - weight) a + weight b`` cell by cell (two models on one grid: a mixture of kernels is a kernel)."""
    if a.transitions.shape != b.transitions.shape:
        raise ValueError(f"models of shapes {a.transitions.shape} and {b.transitions.shape} cannot be mixed")

    def mix(x, y):
        return None if x is None or y is None else (1 - weight) * x + weight * y

    return dataclasses.replace(a, transitions=mix(a.transitions, b.transitions), rewards=mix(a.rewards, b.rewards),
                               success=mix(a.success, b.success))


def shrink_toward(held: TabularModel, fitted: TabularModel) -> TabularModel:
    """``held``'s cells mixed with ``fitted``'s by their rows (weight n / (n + PRIOR_ROWS)); steps past ``fitted``'s
    horizon keep ``held``'s own estimate."""
    if held.counts is None:
        return held
    T = min(held.horizon, fitted.horizon)
    n = held.counts[:T, ..., None].astype(np.float64)
    w = n / (n + PRIOR_ROWS)

    def mix(a, b):
        if a is None or b is None:
            return a
        out = a.copy()
        out[:T] = w[..., 0] * a[:T] + (1 - w[..., 0]) * b[:T]
        return out

    transitions = held.transitions.copy()
    transitions[:T] = w * held.transitions[:T] + (1 - w) * fitted.transitions[:T]
    if T < held.horizon:  # the fitted model's last step ends every episode; the held-out one goes on
        transitions[T - 1] = held.transitions[T - 1]
    return dataclasses.replace(held, transitions=transitions, rewards=mix(held.rewards, fitted.rewards),
                               success=mix(held.success, fitted.success))


def judged(judge: TabularModel, grid: Discretizer, decide: Callable, budget: int) -> tuple[float, float]:
    """(expected success, expected interventions) of ``decide`` under a cap of ``budget`` in ``judge``."""
    policy = grid_policy(decide, grid, judge.horizon, budget)
    result = evaluate(judge, policy, budget, hard_budget=True)
    return result.expected_success, result.expected_interventions
