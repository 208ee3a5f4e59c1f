"""The stationary model with a state's risk read off a curve over the step and the score instead of a count.

    curve = fit_risk_curve(rows)                                   # one regression per action, on the raw scores
    model = estimate_smooth(with_objective(transitions, "success"), curve.rates(state_scores(rows, d)),
                            discretizer=d)

``tabular_rl.stationary`` pools a state's risk over the steps: right where the score means the same at every step,
wrong where it does not (a verifier that reads the success from here scores an early tricky crossing as low as a
dangerous one at the rapids). A cell per (step, state) is right in both cases but holds four rows at 64 episodes.
Between the two, this model fits per action one logistic regression of "the episode ends here as a failure" on the
step and the row's own score:

    logit P(fail | t, score, a) = alpha_a + alpha_a[t] + (beta_a + gamma_a[t]) * z(score)

with ``z`` the standardised logit of the score and one L2 penalty on the per-step terms ``alpha_a[t]`` and
``gamma_a[t]`` (the shared intercept and slope are all but free), so each step's curve is estimated from every
step's rows and differs from the others only as far as they show. A state's risk is the curve at the state's mean
training score. The next state is a draw of the step alone, as in ``tabular_rl.stationary``: the timing the solve
needs (what lies ahead) is in the per-step state distribution. The curve does not depend on the bins, so a judge
of many grids fits it once (``tabular_rl.choice.judge``).

The states stay the discretizer's bins, so the solve, the saved table and ``HelperGate`` are unchanged. An action
whose rows hold no failure or no survivor (help that never fails) keeps the stationary model's pooled rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .discretize import Discretizer
from .estimate import TabularModel
from .stationary import estimate_stationary, pooled_fail_rate
from .transitions import DEFAULT_COLUMNS, Columns, Transitions

PENALTY = 0.1
"""Inverse L2 strength on the per-step terms (scikit-learn's ``C`` on unit columns): strong shrinkage towards the
shared curve, since a step holds a few dozen rows at 64 episodes."""
SHARED_SCALE = 10.0
"""The shared slope's column is scaled up so that the penalty leaves it all but free (a coefficient on a column k
times larger pays 1 / k^2 of the penalty; scikit-learn leaves the intercept unpenalised)."""


def _design(step: np.ndarray, z: np.ndarray, horizon: int) -> np.ndarray:
    one_hot = np.eye(horizon)[np.minimum(step, horizon - 1)]
    return np.column_stack([one_hot, SHARED_SCALE * z, one_hot * z[:, None]])


def _scale(x: np.ndarray, unit: bool) -> np.ndarray:
    """The logit of a score in [0, 1] (clipped off 0 and 1); other scores as they are."""
    if not unit:
        return x
    x = np.clip(x, 1e-4, 1 - 1e-4)
    return np.log(x / (1 - x))


@dataclass
class RiskCurve:
    """P(the episode ends here as a failure | step, score, action), fitted by ``fit_risk_curve``."""

    horizon: int
    center: float
    spread: float
    unit: bool
    """Whether the scores lie in [0, 1] (read on the logit scale)."""
    fits: list
    """Per action, the fitted regression (None: no failure or no survivor among its rows)."""

    def z(self, scores: np.ndarray) -> np.ndarray:
        """Standardised regression input (a missing score reads as the mean)."""
        x = _scale(np.asarray(scores, dtype=np.float64), self.unit)
        return (np.nan_to_num(x, nan=self.center) - self.center) / self.spread

    def rates(self, state_scores: np.ndarray) -> np.ndarray:
        """(steps, states, actions): the curve at each state's score; NaN for an action without a fit."""
        T, S = self.horizon, len(state_scores)
        step, state = (a.ravel() for a in np.meshgrid(np.arange(T), np.arange(S), indexing="ij"))
        grid = _design(step, self.z(state_scores)[state], T)
        out = np.full((T, S, len(self.fits)), np.nan)
        for a, fit in enumerate(self.fits):
            if fit is not None:
                out[:, :, a] = fit.predict_proba(grid)[:, 1].reshape(T, S)
        return out


def failed_here(rows: pl.DataFrame, columns: Columns = DEFAULT_COLUMNS) -> np.ndarray:
    """Per row: whether it is its episode's last and the episode failed (success <= 0)."""
    last = rows.select((pl.col(columns.step) == pl.col(columns.step).max().over(columns.episode)).alias("last"))["last"]
    return (last & (rows[columns.success].cast(pl.Float64) <= 0)).to_numpy()


def state_scores(rows: pl.DataFrame, discretizer: Discretizer, columns: Columns = DEFAULT_COLUMNS) -> np.ndarray:
    """Each state's mean training score (a state no row falls in, such as the unknown one: the mean of them all)."""
    score = rows[columns.score].cast(pl.Float64).to_numpy()
    state = discretizer.transform(score, rows[columns.step].cast(pl.Int64).to_numpy())
    S = discretizer.n_states
    seen = np.isfinite(score)
    total = np.bincount(state[seen], weights=score[seen], minlength=S)
    count = np.bincount(state[seen], minlength=S)
    return np.where(count > 0, total / np.maximum(count, 1), score[seen].mean() if seen.any() else 0.5)


def fit_risk_curve(rows: pl.DataFrame, columns: Columns = DEFAULT_COLUMNS, horizon: int | None = None,
                   penalty: float = PENALTY) -> RiskCurve:
    """The curve of ``rows`` (module docstring): scored rows, one per decision, with the episode's success."""
    from sklearn.linear_model import LogisticRegression

    if columns.success is None or columns.success not in rows.columns:
        raise ValueError("a risk curve reads the episode's success on every row (column 'success'); "
                         "solve with objective='success' on rows that carry it")
    step = rows[columns.step].cast(pl.Int64).to_numpy()
    horizon = horizon or int(step.max()) + 1
    score = rows[columns.score].cast(pl.Float64).to_numpy()
    finite = score[np.isfinite(score)]
    unit = bool(finite.size and finite.min() >= 0 and finite.max() <= 1)
    raw = _scale(finite, unit)
    center = float(raw.mean()) if raw.size else 0.0
    spread = float(raw.std()) if raw.size and raw.std() > 0 else 1.0
    curve = RiskCurve(horizon, center, spread, unit, [None, None])
    failed = failed_here(rows, columns)
    action = rows[columns.action].cast(pl.Int8).to_numpy()
    X = _design(step, curve.z(score), horizon)
    for a in (0, 1):
        mine = action == a
        y = failed[mine]
        if y.all() or not y.any():
            continue
        curve.fits[a] = LogisticRegression(C=penalty, max_iter=1000).fit(X[mine], y)
    return curve


def estimate_smooth(tr: Transitions, rates: np.ndarray, *, smoothing: float = 1.0, discretizer=None) -> TabularModel:
    """The stationary model of ``tr`` with ``rates`` (``RiskCurve.rates`` at each state's score) as the failure
    rates; an action without a curve keeps the pooled rate."""
    rates = np.asarray(rates, dtype=np.float64)
    if np.isnan(rates).any():
        rates = np.where(np.isnan(rates), pooled_fail_rate(tr, smoothing)[None], rates)
    return estimate_stationary(tr, smoothing=smoothing, discretizer=discretizer, fail_rate=rates)
