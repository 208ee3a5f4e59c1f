"""Cross-validation folds over episodes, so that every training row gets an out-of-fold score.

Scores that fit anything downstream (the solver's bins and MDP, thresholds, routers) must come
from a head that never saw the row's episode. Folds are therefore made of whole episodes, and
two kinds of episodes are kept in the same fold:

- episodes that share a rendered prefix: their soft labels are one mean over all of them, so
  splitting them would put a held-out episode's own outcome into the training target;
- episodes of the same task group (ProductQA: the product group, the part of ``task_id`` before
  ``/``; TextWorld: the game), when there are at least as many groups as folds, so a fold's head
  is judged on groups it did not see, as the gate is on the test split.

With fewer groups than folds the folds fall back to prefix-sharing components alone, and ``how`` says so
(``FELL_BACK``; the PRM's ``metrics.json`` and ``helpgate report`` pass it on). Components
are dealt to folds largest first, each to the fold with the fewest rows so far (ties broken by a
seeded shuffle), so folds hold about equal rows.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import polars as pl

_COUNTER = re.compile(r"^(.+)_\d+$")
FELL_BACK = "fell back to episodes from task groups"
"""Said in ``Folds.how`` (and so in the PRM's ``metrics.json`` ``folds.by``) where fewer groups than folds exist."""


def task_group(task_id: str) -> str:
    """The group part of a task id: before the first ``/`` (the whole id when there is none)."""
    return task_id.split("/", 1)[0]


def task_type(task_id: str) -> str | None:
    """The kind a task id names, for per-kind reports only: its last ``/`` part less a trailing
    ``_<n>`` counter (ProductQA question ids are ``<type>_<n>``); None when it has no counter."""
    match = _COUNTER.match(task_id.rsplit("/", 1)[-1])
    return match.group(1) if match else None


class Folds(NamedTuple):
    """Fold and independent group (component) of every episode, and how the folds were formed."""

    fold: dict[str, int]
    group: dict[str, int]
    how: str

    @property
    def k(self) -> int:
        return max(self.fold.values()) + 1

    @property
    def fell_back(self) -> bool:
        """Whether the folds are of episodes because there were fewer task groups than folds."""
        return FELL_BACK in self.how


def _components(n: int, links: list[np.ndarray]) -> np.ndarray:
    """Connected components of ``n`` items, where each array in ``links`` lists items joined together."""
    parent = np.arange(n)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for members in links:
        first = root(int(members[0]))
        for other in members[1:]:
            r = root(int(other))
            if r != first:
                parent[r] = first
    roots = np.array([root(i) for i in range(n)])
    return np.unique(roots, return_inverse=True)[1]


def assign_folds(frame: pl.DataFrame, folds: int, seed: int = 0) -> Folds:
    """The folds (episode id -> fold in ``0..k-1``) of a labelled frame.

    ``frame`` needs ``episode_id`` and ``prefix_key`` (``prm.data.labels.add_labels``); ``task_id`` is
    used when present. ``k`` is ``folds`` or, when fewer independent components exist, their count.
    """
    if folds < 2:
        raise ValueError(f"folds={folds}: out-of-fold scores need at least 2 folds.")
    ids = frame["episode_id"].unique(maintain_order=True).to_list()
    index = {e: i for i, e in enumerate(ids)}
    episode_index = frame["episode_id"].replace_strict(index, return_dtype=pl.Int64)
    shared = (
        frame.select(pl.col("prefix_key"), episode_index.alias("e"))
        .group_by("prefix_key")
        .agg(pl.col("e").unique())
        .filter(pl.col("e").list.len() > 1)["e"]
    )
    prefix_links = [np.asarray(members) for members in shared.to_list()]
    components = _components(len(ids), prefix_links)
    how = "episodes (prefix-sharing episodes together)"
    if "task_id" in frame.columns:
        first_task = frame.group_by("episode_id", maintain_order=True).agg(pl.col("task_id").first())
        groups = [task_group(t) for t in first_task["task_id"].to_list()]
        by_group: dict[str, list[int]] = {}
        for i, g in enumerate(groups):  # same episode order as ``ids``
            by_group.setdefault(g, []).append(i)
        grouped = _components(len(ids), prefix_links + [np.asarray(m) for m in by_group.values()])
        if grouped.max() + 1 >= folds:
            components, how = grouped, "task group (task_id before '/'; prefix-sharing episodes together)"
        else:  # said in metrics.json and the report: these folds do not hold whole groups out
            how += f"; {FELL_BACK} (only {int(grouped.max()) + 1} independent task groups for {folds} folds)"
    n_components = int(components.max()) + 1
    if n_components < 2:
        raise ValueError(
            f"folds={folds}: every episode shares a prefix with another, so there is one inseparable "
            "group and no out-of-fold score is possible. Collect more varied episodes or pass --folds 1."
        )
    k = min(folds, n_components)
    rows = frame.group_by("episode_id", maintain_order=True).len()["len"].to_numpy()
    size = np.bincount(components, weights=rows, minlength=n_components)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_components)
    order = order[np.argsort(-size[order], kind="stable")]
    load = np.zeros(k)
    fold_of_component = np.empty(n_components, dtype=int)
    for c in order:
        target = int(np.argmin(load))
        fold_of_component[c] = target
        load[target] += size[c]
    return Folds({e: int(fold_of_component[components[i]]) for i, e in enumerate(ids)},
                 {e: int(components[i]) for i, e in enumerate(ids)}, how)
