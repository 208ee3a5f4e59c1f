"""Map PRM scores to calibrated probabilities, fitted on out-of-fold scores.

A head's sigmoid is a probability only as far as its training loss made it one; on rows it did
not see it is often too sure or too timid. ``prm train`` fits a monotone map from the
out-of-fold scores (rows each fold's head never saw, the gate's situation) to the outcome, so a
reported 0.7 means that about 7 in 10 such decision points succeed. Two methods:

- ``isotonic``: the non-decreasing step function with the least squared error (scikit-learn's
  ``IsotonicRegression``), evaluated between its thresholds by linear interpolation and clipped
  at the ends, as scikit-learn predicts; flexible, needs rows, and its flat steps give many
  decision points one score, which ties the solver's quantile bins and a threshold's ranks;
- ``platt`` (the default): ``sigmoid(a * logit(score) + b)``, a logistic regression on the score's
  logit; two numbers, safe on few rows, and strictly monotone, so it keeps the score's ranking
  (AUROC, bins) and changes only what the numbers mean.

Saved as ``calibration.json`` in the PRM folder (thresholds or the two numbers: no pickle).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

CALIBRATION_FILE = "calibration.json"
METHODS = ("isotonic", "platt", "none")
DEFAULT_METHOD = "platt"
"""Order-preserving: the solver bins by quantiles and the baselines rank by score, so a default that
made ties (isotonic) would change what they see, not only the numbers' meaning."""
_EPS = 1e-6


@dataclass
class Calibrator:
    """A fitted score -> probability map; ``calibrator(scores)`` applies it."""

    method: str = "none"
    thresholds: list[float] = field(default_factory=list)
    """isotonic: the scores at the steps' ends (increasing)."""
    values: list[float] = field(default_factory=list)
    """isotonic: the probability at each threshold."""
    slope: float = 1.0
    """platt: ``a``."""
    intercept: float = 0.0
    """platt: ``b``."""
    rows: int = 0
    """Rows it was fitted on."""

    def __call__(self, scores) -> np.ndarray:
        scores = np.asarray(scores, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(scores, self.thresholds, self.values)
        if self.method == "platt":
            from scipy.special import expit, logit

            return expit(self.slope * logit(np.clip(scores, _EPS, 1 - _EPS)) + self.intercept)
        return scores

    def save(self, directory: str | os.PathLike) -> Path:
        path = Path(directory) / CALIBRATION_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Calibrator | None:
        """The calibrator saved in a PRM folder, or None when it has none (an older PRM)."""
        path = Path(directory) / CALIBRATION_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        if raw.get("method") not in METHODS:
            raise ValueError(f"{path}: method {raw.get('method')!r} is not one of {METHODS}; "
                             "re-train the PRM (helpgate prm train).")
        calibrator = cls(**raw)
        if calibrator.method == "isotonic" and (not calibrator.thresholds
                                                or len(calibrator.thresholds) != len(calibrator.values)):
            raise ValueError(f"{path}: isotonic thresholds and values must be non-empty and of equal length; "
                             "re-train the PRM (helpgate prm train).")
        return calibrator


def default_method(rows: int) -> str:
    """The method used without ``--calibration`` (``rows``: out-of-fold rows, kept for callers)."""
    return DEFAULT_METHOD


def fit_calibrator(scores: Sequence[float], outcomes: Sequence[float], method: str | None = None) -> Calibrator:
    """Fit ``method`` (default: ``default_method``) on scores in [0, 1] against outcomes in {0, 1}.

    With one class only there is nothing to fit: the identity (method ``none``) is returned."""
    scores = np.asarray(scores, dtype=np.float64)
    outcomes = (np.asarray(outcomes, dtype=np.float64) >= 0.5).astype(np.float64)
    method = method or default_method(len(scores))
    if method not in METHODS:
        raise ValueError(f"calibration={method!r}: use one of {', '.join(METHODS)}.")
    if method == "none" or len(np.unique(outcomes)) < 2:
        return Calibrator("none", rows=len(scores))
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        fitted = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(scores, outcomes)
        return Calibrator("isotonic", thresholds=fitted.X_thresholds_.tolist(), values=fitted.y_thresholds_.tolist(),
                          rows=len(scores))
    from sklearn.linear_model import LogisticRegression

    from scipy.special import logit

    fitted = LogisticRegression(C=1e6).fit(logit(np.clip(scores, _EPS, 1 - _EPS))[:, None], outcomes)
    return Calibrator("platt", slope=float(fitted.coef_[0, 0]), intercept=float(fitted.intercept_[0]),
                      rows=len(scores))


def cross_fitted(scores: Sequence[float], outcomes: Sequence[float], groups: Sequence, method: str | None) -> np.ndarray:
    """Each group's scores calibrated by a map fitted on the other groups only: an honest
    after-calibration figure (the saved map saw every row)."""
    scores = np.asarray(scores, dtype=np.float64)
    outcomes = np.asarray(outcomes, dtype=np.float64)
    groups = np.asarray(groups)
    method = method or default_method(len(scores))
    out = scores.copy()
    for g in np.unique(groups):
        held = groups == g
        if held.all():
            break
        out[held] = fit_calibrator(scores[~held], outcomes[~held], method)(scores[held])
    return out
