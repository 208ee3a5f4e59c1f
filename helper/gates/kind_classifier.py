"""``KindClassifier``: the distilled tiered helper, a classifier over K + 1 classes (0: the agent acts, k: call kind
k) on a decision point's features, its budget left in cost units and each capped kind's calls left.

The features-backend classifier (``helper.gates.features.FeatureClassifier``: gbm or logreg, class-balanced, the
same save and load, the same skops trust) with more than two classes. Its inputs are the one-kind features
(``prm_score``, step, progress, ``budget_left`` and ``budget_per_step`` now in cost units, ``f_<key>``) and
``calls_left_<kind>`` per capped kind. Its labels come from the solved tiered table at every resource state a
logged row could be in (``expand_kinds``), as the one-kind distill labels every budget left
(``distill.expand_labels``), so it learns how the choice moves with what is left, not only at the logged state.

``best(proba, allowed)``: the most probable class among the agent and the kinds the count allows now, so a
classifier that errs can only pick a kind that is affordable (the count's lock is still what guarantees it).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from helper.gates.features import FeatureClassifier, frame_features, observation_features

CALLS = "calls_left_"
LABEL = "optimal_kind_class"


class KindClassifier(FeatureClassifier):
    """P(each of K + 1 classes) from a feature row; see the module docstring."""

    def fit(self, X: np.ndarray, y: np.ndarray) -> KindClassifier:
        """Unweighted, unlike the one-kind classifier: its labels are a table to copy, and weighting a rare kind
        (the dear human) up makes the booster call it where the table does not."""
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y).astype(int)
        if X.shape[1] != len(self.feature_names):
            raise ValueError(f"X has {X.shape[1]} columns but feature_names lists {len(self.feature_names)}")
        classes = np.unique(y)
        self.constant_, self.estimator_ = (float(classes[0]) if classes.size else 0.0), None
        if classes.size >= 2:
            self.constant_, self.estimator_ = None, self._make().fit(X, y)
        return self

    def proba(self, X: np.ndarray, n_classes: int) -> np.ndarray:
        """(rows, ``n_classes``) probabilities; a class never seen in training has 0."""
        X = np.asarray(X, dtype=np.float64)
        out = np.zeros((X.shape[0], n_classes))
        if self.constant_ is not None:
            out[:, int(self.constant_)] = 1.0
            return out
        if self.estimator_ is None:
            raise RuntimeError("KindClassifier is not fitted: call fit(X, y) or KindClassifier.load(path)")
        out[:, self.estimator_.classes_.astype(int)] = self.estimator_.predict_proba(X)
        return out

    def predict_classes(self, X: np.ndarray, n_classes: int) -> np.ndarray:
        return self.proba(X, n_classes).argmax(1)


def split_names(names) -> tuple[list[str], list[str]]:
    """(one-kind feature names, the capped kinds whose calls left are inputs)."""
    return [n for n in names if not n.startswith(CALLS)], [n[len(CALLS):] for n in names if n.startswith(CALLS)]


def kind_frame_features(frame: pl.DataFrame, names) -> np.ndarray:
    """Feature matrix of rows carrying ``budget_left`` (cost) and ``calls_left_<kind>`` columns."""
    base, capped = split_names(names)
    X = frame_features(frame, base)
    columns = {n: X[:, i] for i, n in enumerate(base)}
    columns |= {CALLS + k: frame[CALLS + k].cast(pl.Float64).to_numpy() for k in capped}
    return np.column_stack([columns[n] for n in names])


def kind_observation_features(observation, budget_left: float, calls_left: dict, score: float, names) -> np.ndarray:
    base, capped = split_names(names)
    row = observation_features(observation, budget_left, score, base)[0].tolist()
    values = dict(zip(base, row)) | {CALLS + k: float(calls_left.get(k, 0)) for k in capped}
    return np.array([[values[n] for n in names]])


def expand_kinds(frame: pl.DataFrame, solution, discretizer) -> pl.DataFrame:
    """One row per (logged row, resource state where some kind is affordable): its ``budget_left`` (cost units of
    the user), ``calls_left_<kind>`` per capped kind and ``LABEL``, the table's action there (0: the agent)."""
    res = solution.resources
    states = res.states()
    affordable = (res.next_index()[1:] >= 0).any(0)
    step = frame["step"].cast(pl.Int64).to_numpy()
    cell = discretizer.transform(frame["prm_score"].cast(pl.Float64).to_numpy(), step)
    t = np.clip(step, 0, solution.horizon - 1)
    table = solution.tables[0 if solution.mix >= 0.5 else 1]
    parts = []
    for r in np.flatnonzero(affordable):
        columns = {"budget_left": pl.lit(float(states[r, 0]) / res.scale),
                   LABEL: pl.Series(table[t, cell, r].astype(np.int64))}
        for i, k in enumerate(res.capped):
            columns[CALLS + solution.kinds[k - 1]] = pl.lit(int(states[r, 1 + i]))
        parts.append(frame.with_columns(**columns))
    if not parts:
        raise ValueError("the solved budget affords no call: there is no decision to learn. Solve for a larger budget.")
    return pl.concat(parts)


def best(proba: np.ndarray, allowed: list[int]) -> int:
    """The most probable class among 0 (the agent) and ``allowed`` (kinds affordable now)."""
    options = [0, *allowed]
    return options[int(np.argmax(proba[options]))]
