"""Numeric features of a decision point, and the features-backend helper classifier.

The same feature vector is built from a logged row (training) and from a live ``Observation``
(the gate), so the classifier sees identical inputs in both places:

- ``prm_score``: the PRM's P(success) at this decision point (NaN when it could not be computed);
- ``step``, ``horizon``, ``progress = step / horizon``, ``steps_left = horizon - step``;
- ``budget_left`` and ``budget_per_step = budget_left / steps_left`` (1 or more means the budget
  covers every remaining decision: a rule a linear model cannot form from the two alone);
- ``f_<key>`` for every key of the observation's ``features`` (the ``features`` column),
  the keys fixed at fit time; a key missing at prediction time is NaN.

``FeatureClassifier`` follows scikit-learn habits (``fit``, ``predict_proba``, ``predict``,
``save``/``load``) around a gradient-boosting (``gbm``) or logistic-regression (``logreg``,
on standardised inputs) model, class-weighted so that the rarer label counts as much as the
common one. Missing values are imputed with the training median plus a was-missing indicator.

A saved classifier is ``classifier.json`` plus ``model.skops`` (``skops.io``: it rebuilds only
scikit-learn / numpy objects, never runs code from the file). Loading lists the file's types that
skops does not trust by default and accepts them only when they are in ``TRUSTED_TYPES`` (the
few this classifier is made of); a file naming any other type is refused. Old ``model.pkl``
folders are refused: loading a pickle would run whatever code the file holds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from trajectories.files import read_kind_json, write_json_atomic
from trajectories.number_maps import number_map_keys, number_maps

BASE_FEATURES = ("prm_score", "step", "horizon", "progress", "steps_left", "budget_left", "budget_per_step")
SCORE_FEATURE = "prm_score"
MODELS = ("gbm", "logreg")
_KIND = "helpgate.helper.FeatureClassifier"
MODEL_FILE = "model.skops"
TRUSTED_TYPES = frozenset({"numpy.dtype", "sklearn.tree._tree.Tree"})
"""Types outside skops' default trust that the gbm / logreg pipelines are made of."""


class UnsafeModelFile(ValueError):
    """A saved model that cannot be loaded without running or trusting unexpected code."""


def feature_keys(frame: pl.DataFrame) -> list[str]:
    """Sorted keys of the ``features`` column (empty when the column is absent)."""
    return number_map_keys(frame["features"]) if "features" in frame.columns else []


def _horizon(frame: pl.DataFrame) -> np.ndarray:
    if "horizon" in frame.columns and frame["horizon"].null_count() == 0:
        return frame["horizon"].cast(pl.Float64).to_numpy()
    # Without a horizon column the episode's own length is the horizon.
    return frame.select((pl.col("step").max().over("episode_id") + 1).cast(pl.Float64)).to_series().to_numpy()


def frame_features(frame: pl.DataFrame, names: Sequence[str], budget_left=None) -> np.ndarray:
    """Feature matrix (rows x ``names``) of logged rows; ``budget_left`` overrides the column."""
    n = frame.height
    step = frame["step"].cast(pl.Float64).to_numpy()
    horizon = _horizon(frame)
    left = frame["budget_left"].cast(pl.Float64).to_numpy() if budget_left is None else np.broadcast_to(
        np.asarray(budget_left, dtype=np.float64), (n,))
    steps_left = np.maximum(horizon - step, 1.0)
    score = (frame[SCORE_FEATURE].cast(pl.Float64).fill_null(math.nan).to_numpy()
             if SCORE_FEATURE in frame.columns else np.full(n, math.nan))
    base = {
        "prm_score": score, "step": step, "horizon": horizon, "progress": step / np.maximum(horizon, 1.0),
        "steps_left": steps_left, "budget_left": left, "budget_per_step": left / steps_left,
    }
    extra_names = [name for name in names if name not in base]
    extra = {name: np.full(n, math.nan) for name in extra_names}
    if extra_names and "features" in frame.columns:
        rows = number_maps(frame["features"])
        for name in extra_names:
            key = name[2:]
            extra[name] = np.array([d.get(key, math.nan) for d in rows], dtype=np.float64)
    columns = base | extra
    return np.column_stack([columns[name] for name in names]) if names else np.zeros((n, 0))


def observation_features(observation, budget_left: int, score: float, names: Sequence[str]) -> np.ndarray:
    """One feature row (1 x ``names``) for a live observation."""
    step = float(observation.step)
    horizon = float(observation.horizon) if observation.horizon else step + 1.0
    steps_left = max(horizon - step, 1.0)
    values = {
        "prm_score": float(score), "step": step, "horizon": horizon, "progress": step / max(horizon, 1.0),
        "steps_left": steps_left, "budget_left": float(budget_left), "budget_per_step": budget_left / steps_left,
    }
    features = observation.features or {}
    row = [values[name] if name in values else float(features.get(name[2:], math.nan)) for name in names]
    return np.asarray(row, dtype=np.float64)[None, :]


def default_feature_names(frame: pl.DataFrame, use_score: bool = True) -> list[str]:
    names = [name for name in BASE_FEATURES if use_score or name != SCORE_FEATURE]
    return names + [f"f_{key}" for key in feature_keys(frame)]


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """Per-row weights n / (classes * n_class): each class present carries an equal share of the total weight (half
    each for two; ``helper.gates.kind_classifier`` has one class per kind of help and the agent)."""
    y = np.asarray(y).astype(int)
    counts = np.bincount(y, minlength=2).astype(np.float64)
    present = counts > 0
    weights = np.zeros(counts.size)
    weights[present] = y.size / (present.sum() * counts[present])
    return weights[y]


class FeatureClassifier:
    """P(intervene) from a feature row; see the module docstring."""

    def __init__(self, model: str = "gbm", feature_names: Sequence[str] = (), random_state: int = 0,
                 max_iter: int = 150):
        if model not in MODELS:
            raise ValueError(f"model={model!r}: choose one of {', '.join(MODELS)}")
        self.model = model
        self.feature_names = list(feature_names)
        self.random_state = random_state
        self.max_iter = max_iter
        self.estimator_ = None
        self.constant_: float | None = None

    def _make(self):
        from sklearn.ensemble import GradientBoostingClassifier
        from sklearn.impute import SimpleImputer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        # Missing values (no PRM score, a feature key absent) are imputed with the training
        # median plus a was-missing indicator; keep_empty_features keeps an all-NaN column in place.
        imputer = SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True)
        if self.model == "gbm":
            # The classic (not histogram) booster: no OpenMP, so a one-row decision costs well under
            # a millisecond and does not fight other processes for cores.
            return make_pipeline(imputer, GradientBoostingClassifier(
                n_estimators=self.max_iter, max_depth=3, learning_rate=0.1, random_state=self.random_state))
        return make_pipeline(imputer, StandardScaler(), LogisticRegression(max_iter=2000))

    def fit(self, X: np.ndarray, y: np.ndarray) -> FeatureClassifier:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y).astype(int)
        if X.shape[1] != len(self.feature_names):
            raise ValueError(f"X has {X.shape[1]} columns but feature_names lists {len(self.feature_names)}")
        classes = np.unique(y)
        if classes.size < 2:
            # One label everywhere (e.g. a budget so large the policy always intervenes): predict it.
            self.constant_, self.estimator_ = float(classes[0]) if classes.size else 0.0, None
            return self
        self.constant_ = None
        self.estimator_ = self._make()
        step = self.estimator_.steps[-1][0]
        self.estimator_.fit(X, y, **{f"{step}__sample_weight": balanced_weights(y)})
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(intervene) per row (a 1-D array, unlike scikit-learn's two columns)."""
        X = np.asarray(X, dtype=np.float64)
        if self.constant_ is not None:
            return np.full(X.shape[0], self.constant_)
        if self.estimator_ is None:
            raise RuntimeError("FeatureClassifier is not fitted: call fit(X, y) or FeatureClassifier.load(path)")
        return self.estimator_.predict_proba(X)[:, 1]

    def predict(self, X: np.ndarray, threshold: float = 0.5) -> np.ndarray:
        return self.predict_proba(X) >= threshold

    def save(self, directory: str | Path) -> Path:
        import sklearn
        import skops.io

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.estimator_ is not None:
            skops.io.dump(self.estimator_, directory / MODEL_FILE)
        else:
            (directory / MODEL_FILE).unlink(missing_ok=True)
        meta = {"kind": _KIND, "model": self.model, "feature_names": self.feature_names,
                "random_state": self.random_state, "max_iter": self.max_iter, "constant": self.constant_,
                "sklearn": sklearn.__version__}
        write_json_atomic(meta, directory / "classifier.json")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> FeatureClassifier:
        import sklearn

        directory = Path(directory)
        if (directory / "model.pkl").exists() and not (directory / MODEL_FILE).exists():
            raise UnsafeModelFile(f"{directory / 'model.pkl'}: pickled classifiers are no longer loaded (a pickle "
                                  "runs code from the file); re-run `helpgate distill` to write model.skops.")
        meta = read_kind_json(directory / "classifier.json", _KIND, "a features-backend classifier folder")
        if meta.get("sklearn") != sklearn.__version__:
            warnings.warn(f"{directory} was saved with scikit-learn {meta.get('sklearn')}, this is "
                          f"{sklearn.__version__}; predictions may differ. Re-run helpgate distill to refresh.")
        self = cls(meta["model"], meta["feature_names"], meta["random_state"], meta["max_iter"])
        if meta.get("constant") is not None:
            self.constant_ = float(meta["constant"])
        else:
            self.estimator_ = load_skops(directory / MODEL_FILE)
        return self

    def __repr__(self) -> str:
        fitted = self.estimator_ is not None or self.constant_ is not None
        return f"FeatureClassifier(model={self.model!r}, features={len(self.feature_names)}, fitted={fitted})"


def observation_matrix(observations: Sequence, budgets: Sequence[int], scores: Sequence[float],
                       names: Sequence[str]) -> np.ndarray:
    """Stack ``observation_features`` for a batch (used by the online-RL policy)."""
    if not observations:
        return np.zeros((0, len(names)))
    return np.vstack([observation_features(o, b, s, names) for o, b, s in zip(observations, budgets, scores)])


def load_skops(path: Path):
    """An estimator from a ``skops`` file, trusting only ``TRUSTED_TYPES`` beyond skops' defaults."""
    import skops.io

    if not path.exists():
        raise FileNotFoundError(f"{path}: not found; re-run `helpgate distill` to write the classifier.")
    try:
        untrusted = skops.io.get_untrusted_types(file=path)
    except Exception as error:
        raise UnsafeModelFile(f"{path}: not a readable skops file ({error}); re-run `helpgate distill`.") from error
    unexpected = sorted(set(untrusted) - TRUSTED_TYPES)
    if unexpected:
        raise UnsafeModelFile(f"{path}: holds types a helper classifier never has ({', '.join(unexpected)}); "
                              "refusing to load it. Re-run `helpgate distill` to write a fresh one.")
    return skops.io.load(path, trusted=list(untrusted))
