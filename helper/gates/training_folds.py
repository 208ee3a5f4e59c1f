"""The units a cross-fitted choice on training rows keeps whole in its folds: the router's and knn's calibration, the
threshold baselines' levels and the helper's member (``fold_ids``)."""

from __future__ import annotations

import numpy as np
import polars as pl


def router_fold_groups(rows: pl.DataFrame, folds: int) -> tuple[np.ndarray, str]:
    """Per row, the unit the router's calibration folds keep whole, and its name: the task group (``task_id``
    before ``/``, ``prm.data.folds.task_group``) where there are at least ``folds`` groups, else the episode."""
    from prm.data.folds import task_group

    if "task_id" in rows.columns:
        groups = np.array([task_group(str(t)) for t in rows["task_id"].to_list()], dtype=object)
        if len(set(groups.tolist())) >= folds:
            return groups, "task group"
    return rows["episode_id"].to_numpy(), "episode"


def fold_ids(rows: pl.DataFrame, folds: int = 5) -> tuple[np.ndarray, str]:
    """Per row, the training fold a cross-fitted choice holds it out in (``GroupKFold`` over
    ``router_fold_groups``: whole task groups where there are enough, else whole episodes), and that unit's name."""
    from sklearn.model_selection import GroupKFold

    groups, by = router_fold_groups(rows, folds)
    ids = np.full(rows.height, -1, dtype=np.int64)
    splits = min(folds, len(np.unique(groups)))
    if splits < 2:
        return np.zeros(rows.height, dtype=np.int64), by
    for fold, (_, test) in enumerate(GroupKFold(n_splits=splits).split(np.zeros(rows.height), groups=groups)):
        ids[test] = fold
    return ids, by
