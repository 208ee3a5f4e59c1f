"""The units a learned baseline's threshold calibration keeps whole in its folds (the router's and knn's)."""

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
