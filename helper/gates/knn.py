"""The ``knn`` baseline: the failure rate of the nearest training decision points by a sentence encoder.

RouterBench and LLMRouterBench find a k-nearest-neighbour router hard to beat: embed the query, look up
the ``k`` most similar training queries, predict the mean of their outcomes. Here a query is a decision
point as a deployed agent sees it (``decision_texts``): the state text, and in ``proposal`` mode the base
agent's proposal too, each embedded by the sentence encoder (the embedded all-MiniLM-L6-v2 through
``agile.executor.memory.Embedder``: mean pooling, unit norm). With two texts the point's vector is the
two unit vectors side by side over sqrt(2), so a dot product is the mean of the two cosines. Nothing
else is read: no annotation, no budget, no PRM.

- ``failure_labels``: which training rows are neighbours and whether each failed, by the target the
  PRM of the run was trained on (its ``metrics.json``: the label column, the success threshold, the
  rendering, base rows only or all) and as its report judges it: a step target (process, proposal,
  fatal, mc) fails where the label is below 1/2; an episode target (hard, soft) where the episode's
  success is below the threshold. Without a PRM folder, the router's rule (a step the env did not
  reward where it rewards steps, else a step of a failed episode; base-agent rows).
- ``KnnRate``: exact top-``k`` by cosine (ties: the lower row index first, a stable sort) and the
  share of those ``k`` that failed. The gate's failure score is that share plus, to order equal shares
  (only ``k + 1`` values exist), the similarity-weighted share over ``2k + 2``: less than the gap of
  ``1/k`` between two shares, so it never reorders them. Without the tie-break, every decision at the
  calibrated share would fire, and the cap would spend the budget on an episode's first ones.
- ``fit``: the scorer on every training point, and the out-of-fold score of every training decision: folds of
  whole task groups (``router_fold_groups``, as the router's), each scored by the points of the other folds only,
  so its levels (``helper.gates.threshold_levels``) are chosen on groups its neighbours did not come from, as
  the test groups are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl


EMBEDDED = "minilm"
"""``--knn-encoder`` naming the embedded all-MiniLM-L6-v2."""
TINY = "tiny"
"""``--knn-encoder`` naming a random two-layer BERT with MiniLM's tokenizer (tests)."""


class Unusable(ValueError):
    """Training rows the kNN gate cannot rank by (the sweep skips it, saying why)."""


def load_embedder(name: str = EMBEDDED, device: str | None = None, max_length: int = 128):
    """The sentence encoder (``agile.executor.memory.Embedder``): the embedded all-MiniLM-L6-v2 (``minilm``),
    ``tiny`` (a random two-layer BERT with MiniLM's tokenizer, seeded: for tests) or a local encoder folder.

    It reads a text's last ``max_length`` tokens (truncation on the left): a ProductQA state opens with the
    group's instructions and table schema, the same at every decision of the group, and ends with what
    differs (the question, the product, the memory lines); a game's state ends with the latest outcome."""
    from agile.executor.memory import Embedder

    if name == TINY:
        import tempfile

        from prm.verifiers.encoder import load_encoder

        model, tokenizer = load_encoder(TINY, "cpu", seed=0)
        name = tempfile.mkdtemp(prefix="knn-tiny-")
        model.save_pretrained(name)
        tokenizer.save_pretrained(name)
    elif name != EMBEDDED and not Path(name).is_dir():
        raise ValueError(f"knn_encoder={name!r}: not a folder; pass minilm (the embedded all-MiniLM-L6-v2) or a "
                         "local sentence-encoder folder (a Hugging Face encoder and its tokenizer).")
    # Batches of 32: padding moves a vector by about 1e-7, which reorders no neighbour that matters.
    embedder = Embedder(None if name == EMBEDDED else name, device=device or "cpu", batch_size=32,
                        max_length=max_length)
    embedder.tokenizer.truncation_side = "left"
    return embedder


def proposal_text(proposal) -> str:
    """The text of a proposal (an ``Action``, or its text)."""
    return proposal if isinstance(proposal, str) else str(getattr(proposal, "text", "") or "")


def decision_vectors(embedder, states: Sequence[str], proposals: Sequence[str] | None = None) -> np.ndarray:
    """One unit vector per decision point: its state's embedding, or the state's and the proposal's side
    by side over sqrt(2) (a dot product of two is then the mean of the two cosines)."""
    vectors = _unit(np.asarray(embedder.encode(list(states)), dtype=np.float64))
    if proposals is None:
        return vectors
    second = _unit(np.asarray(embedder.encode(list(proposals)), dtype=np.float64))
    return np.hstack([vectors, second]) / np.sqrt(2.0)


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


class KnnRate:
    """Exact nearest neighbours of unit vectors by cosine, and the share of them that failed."""

    def __init__(self, vectors: np.ndarray, failed: np.ndarray, k: int):
        if k < 1:
            raise ValueError(f"knn_k={k}: give 1 or more neighbours.")
        self.vectors = np.asarray(vectors, dtype=np.float64)
        self.failed = np.asarray(failed, dtype=np.float64)
        if len(self.vectors) != len(self.failed) or len(self.vectors) == 0:
            raise ValueError(f"KnnRate: {len(self.vectors)} vectors and {len(self.failed)} labels; give as many "
                             "of each, at least one.")
        self.k = min(int(k), len(self.vectors))

    def neighbours(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query, the indices of its ``k`` nearest points (most similar first; ties: lower index) and
        their cosines."""
        similarity = np.atleast_2d(queries) @ self.vectors.T
        order = np.argsort(-similarity, axis=1, kind="stable")[:, : self.k]
        return order, np.take_along_axis(similarity, order, axis=1)

    def rates(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query: the share of its ``k`` nearest points that failed, and that share weighted by each
        neighbour's similarity mapped to [0, 1] ((1 + cosine) / 2)."""
        order, similarity = self.neighbours(queries)
        failed = self.failed[order]
        weights = (1.0 + np.clip(similarity, -1.0, 1.0)) / 2.0 + 1e-12
        return failed.mean(axis=1), (weights * failed).sum(axis=1) / weights.sum(axis=1)

    def failure_score(self, queries: np.ndarray) -> np.ndarray:
        """The share that failed, equal shares ordered by the weighted share (see the module docstring)."""
        rate, weighted = self.rates(queries)
        return rate + weighted / (2 * self.k + 2)


def prm_label_settings(prm: str | Path | None) -> dict | None:
    """What the PRM at ``prm`` was trained on (its ``metrics.json``): label column, threshold, rendering,
    rows; None where there is no such file."""
    path = Path(prm) / "metrics.json" if prm else None
    if path is None or not path.is_file():
        return None
    metrics = json.loads(path.read_text())
    config = metrics.get("config") or {}
    return {"label": metrics["target"], "success_threshold": float(config.get("success_threshold", 0.5)),
            "tag_after": config.get("tag_after", "action"), "base_only": bool(config.get("base_only", False)),
            "from": str(path)}


def failure_labels(rows: pl.DataFrame, settings: dict | None) -> tuple[np.ndarray, np.ndarray, str]:
    """Per row of ``rows`` (in its order): whether it is a neighbour point, whether it failed, and how
    the failure was read (for ``summary.json``)."""
    from prm.data import labels as L

    if settings is not None:
        label = settings["label"]
        target = next(t for t, column in L.LABEL_COLUMNS.items() if column == label)
        framed = L.add_labels(rows.with_row_index("_row"), settings["success_threshold"], settings["tag_after"])
        framed = framed.sort("_row")
        column = label if target in L.STEP_TARGETS else "label_hard"
        values = framed[column].to_numpy().astype(np.float64)
        used = np.isfinite(values)
        if settings["base_only"]:
            used &= (framed["actor"] == "base").to_numpy()
        how = (f"the PRM's target {label} ({settings['from']}): "
               + (f"{column} < 0.5" if target in L.STEP_TARGETS else f"episode success < {settings['success_threshold']}")
               + (", base-agent rows" if settings["base_only"] else ", every row"))
        return used, np.nan_to_num(values, nan=1.0) < 0.5, how
    outcome = "reward" if L.has_process_rewards(rows) else "success"
    used = (rows["actor"] == "base").to_numpy()
    return used, rows[outcome].to_numpy() < 0.5, f"no PRM folder: {outcome} < 0.5, base-agent rows (as the router)"


class KnnScorer:
    """``score(observation[, proposal])``: 1 minus the nearest training points' failure score, so that
    ``ScoreThresholdGate`` (which fires at or below its threshold) fires where neighbours failed."""

    def __init__(self, embedder, rate: KnnRate, decide_after: str = "state"):
        self.embedder, self.rate, self.decide_after = embedder, rate, decide_after

    def score(self, observation, proposal=None) -> float:
        proposals = [proposal_text(proposal)] if self.decide_after == "proposal" else None
        query = decision_vectors(self.embedder, [observation.state_text], proposals)
        return 1.0 - float(self.rate.failure_score(query)[0])


def out_of_fold_scores(vectors: np.ndarray, failed: np.ndarray, used: np.ndarray, groups: np.ndarray, folds: int,
                       k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the gate's score (1 minus the failure score) from the points of the other folds only, and the
    row's fold: folds of whole ``groups`` (``GroupKFold``); NaN where the other folds hold no point."""
    from sklearn.model_selection import GroupKFold

    oof, fold_of = np.full(len(vectors), np.nan), np.full(len(vectors), -1)
    splits = GroupKFold(n_splits=min(folds, len(np.unique(groups)))).split(vectors, failed, groups)
    for fold, (train, test) in enumerate(splits):
        fold_of[test] = fold
        train = train[used[train]]
        if len(train):
            oof[test] = 1.0 - KnnRate(vectors[train], failed[train], k).failure_score(vectors[test])
    return oof, fold_of


def fit(rows: pl.DataFrame, embedder, k: int, decide_after: str = "state", settings: dict | None = None,
        folds: int = 5) -> tuple[KnnScorer, np.ndarray, dict]:
    """The scorer on every training point of ``rows``, its out-of-fold score of every training row (folds of
    whole groups: what its levels are chosen on, ``helper.gates.threshold_levels``), and a report for
    ``summary.json``."""
    from helper.gates.training_folds import router_fold_groups

    proposals = None
    if decide_after == "proposal":
        if "proposal_text" not in rows.columns or (rows["proposal_text"].fill_null("") == "").all():
            raise Unusable("knn with decide_after='proposal' needs training rows with proposal_text (collect "
                             "--decide-after proposal)")
        proposals = rows["proposal_text"].fill_null("").to_list()
    vectors = decision_vectors(embedder, rows["state_text"].to_list(), proposals)
    used, failed, how = failure_labels(rows, settings)
    if used.sum() == 0 or len(set(failed[used].tolist())) < 2:
        raise Unusable(f"knn: the training points ({int(used.sum())}, failure read as {how}) all succeed or all "
                         "fail: nothing to rank by.")
    groups, by = router_fold_groups(rows, folds)
    oof, _ = out_of_fold_scores(vectors, failed, used, groups, folds, k)
    report = {"k": int(k), "points": int(used.sum()), "failed_share": float(failed[used].mean()), "labels": how,
              "texts": "state and proposal" if proposals else "state", "calibration_folds_by": by}
    return KnnScorer(embedder, KnnRate(vectors[used], failed[used], k), decide_after), oof, report
