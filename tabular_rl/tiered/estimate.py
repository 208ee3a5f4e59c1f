"""Estimate a ``TieredModel`` from logged rows that name the help they called.

A row's action is read from its ``help_kind`` column: empty (null or "") on the agent's own rows,
else the kind's name (one of ``kinds``) or its index 1 .. K (0 is the agent). Where the row also
has ``intervened``, the two must agree, so a shard whose kind column lost its values is refused
rather than read as the agent acting. The estimator is ``tabular_rl.estimate``'s, run with K + 1
actions (``estimate_tables``), so smoothing, step back-off and the success credit are the same.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from ..discretize import Discretizer
from ..estimate import MissingActionError, check_estimator_weights, estimate_tables
from ..transitions import DEFAULT_COLUMNS, Columns, extract_transitions, with_objective
from .model import TieredModel

KIND_COLUMN = "help_kind"
ACTION = "__tiered_action"
"""The column the actions are written to for ``extract_transitions`` (a name no dataset uses)."""


def help_kind_actions(df: pl.DataFrame, kinds, kind_column: str = KIND_COLUMN,
                      intervened_column: str | None = "intervened") -> np.ndarray:
    """Per row, its action: 0 for the agent, k for ``kinds[k - 1]`` (see the module docstring)."""
    kinds = tuple(str(k) for k in kinds)
    if kind_column not in df.columns:
        raise ValueError(f"dataset has no {kind_column!r} column; it has {df.columns}. Rows of tiered help "
                         "name the kind they called (empty where the agent acted)")
    column = df[kind_column]
    if column.dtype == pl.Null:
        actions = np.zeros(df.height, dtype=np.int64)
    elif column.dtype.is_integer():
        actions = column.fill_null(0).cast(pl.Int64).to_numpy()
        bad = (actions < 0) | (actions > len(kinds))
        if bad.any():
            raise ValueError(f"column {kind_column!r} holds {int(actions[bad][0])}: kinds are 1 .. {len(kinds)} "
                             f"({', '.join(kinds)}), 0 or empty where the agent acted")
    else:
        names = column.cast(pl.String).fill_null("")
        unknown = sorted(set(names.unique().to_list()) - {"", *kinds})
        if unknown:
            raise ValueError(f"column {kind_column!r} names kind(s) {unknown} not among {list(kinds)}; "
                             "give every kind the data used (kinds=...)")
        lookup = {"": 0} | {k: i + 1 for i, k in enumerate(kinds)}
        actions = names.replace_strict(lookup, return_dtype=pl.Int64).to_numpy()
    if intervened_column is not None and intervened_column in df.columns:
        intervened = df[intervened_column].cast(pl.Boolean).fill_null(False).to_numpy()
        disagree = intervened != (actions > 0)
        if disagree.any():
            i = int(np.argmax(disagree))
            raise ValueError(f"row {i}: {intervened_column}={bool(intervened[i])} but {kind_column}="
                             f"{column[i]!r}; a row calls a kind of help exactly when it intervened")
    return actions


def estimate_tiered(df: pl.DataFrame, discretizer: Discretizer, kinds, *, columns: Columns = DEFAULT_COLUMNS,
                    kind_column: str = KIND_COLUMN, smoothing: float = 1.0, backoff: float | str = "auto",
                    objective: str = "reward", shaping: float = 0.0) -> TieredModel:
    """The MDP with one action per kind of help, from a scored dataset and a fitted discretizer.

    Raises ``MissingActionError`` naming a kind (or the agent) that no row takes: its effect cannot be estimated."""
    if not discretizer.is_fitted:
        raise ValueError("discretizer is not fitted: call discretizer.fit(df['prm_score'], df['step']) first")
    check_estimator_weights(smoothing, backoff)
    kinds = tuple(str(k) for k in kinds)
    actions = help_kind_actions(df, kinds, kind_column, columns.action)
    taken = np.bincount(actions, minlength=len(kinds) + 1)
    for a, n in enumerate(taken):
        if n == 0:
            who = "the agent acting (help_kind empty)" if a == 0 else f"kind {kinds[a - 1]!r}"
            raise MissingActionError(f"no logged row is {who}, so its effect cannot be estimated: collect with "
                                     "random calls of every kind of help, and rows where the agent acts")
    frame = df.with_columns(pl.Series(ACTION, actions))
    tr = with_objective(extract_transitions(frame, discretizer, replace(columns, action=ACTION)), objective, shaping)
    tables = estimate_tables(tr, n_actions=len(kinds) + 1, smoothing=smoothing, backoff=backoff)
    del tables["next_counts"]
    if tables.pop("entries") is not None:
        raise ValueError("tiered help: some episode's first decision is past step 0; the tiered solve reads episodes "
                         "from their first step (align no rows at their ends for it)")
    return TieredModel(**tables, kinds=kinds, discretizer=discretizer, smoothing=float(smoothing),
                       n_truncated=tr.n_truncated)
