"""Estimate a ``TieredModel`` from logged rows that name the help they called.

A row's action is read from its ``help_kind`` column: empty (null or "") on the agent's own rows,
else the kind's name (one of ``kinds``) or its index 1 .. K (0 is the agent). Where the row also
has ``intervened``, the two must agree, so a shard whose kind column lost its values is refused
rather than read as the agent acting. The estimator is ``tabular_rl.estimate``'s, run with K + 1
actions (``estimate_tables``), so smoothing, step back-off and the success credit are the same.

**Paired outcomes** (``paired_gains``), where every row logs the agent's own outcome at its decision whether or not
help replaced it (``proposal_reward``) and decisions are separate questions (an episode's success is the mean of its
rewards: ``tabular_rl.choice.replay.replayable``; ProductQA deciding after the proposal). The agent's value in a cell
is then its own outcome over *every* row of the cell, and a row that called kind k shows both what k earned and
what the agent would have earned on the same decision. Kind k's value in a cell is a control-variate estimate: the
mean over the cell's k rows of ``reward - beta_k * own``, plus ``beta_k`` times the agent's value in the cell, with
``beta_k`` the regression slope of k's reward on the agent's own outcome over all k's rows (clipped to [0, 1]), each
cell's mean shrunk toward its mean over all k's rows by ``PAIRED_PRIOR`` rows. A help that answers as the agent does
(slope 1) is read by its paired gain, about zero (on ProductQA a majority vote of the agent's own samples): read
from its own few rows against the agent's rows, the difference of two independent cell means is noise that the
solve's maximum over kinds turns into a bias toward the kind with the fewest rows, and the first solve bought it for
nothing. A help whose reward does not follow the agent's (slope 0: the human, always right) is read by its own
mean, its gain measured against the agent's value from every row of the cell, not from its own few. On the same
premise (a decision changes nothing later) every action's next state is the cell's, pooled over the actions' rows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from ..choice.replay import replayable
from ..discretize import Discretizer
from ..estimate import MissingActionError, check_estimator_weights, estimate_tables
from ..transitions import DEFAULT_COLUMNS, Columns, extract_transitions, with_objective
from .mdp import TieredModel

KIND_COLUMN = "help_kind"
PAIRED_PRIOR = 2.0
"""Rows' worth of a kind's pooled paired gain in each cell (``paired_gains``)."""
BASE_COLUMN = "proposal_reward"
"""The agent's own outcome at every decision, where the rows log it."""
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
                    objective: str = "reward", shaping: float = 0.0, paired: bool | None = None) -> TieredModel:
    """The MDP with one action per kind of help, from a scored dataset and a fitted discretizer. ``paired``: each
    kind's value from its paired gains over the agent (module docstring); None: where the rows allow it.

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
    model = TieredModel(**tables, kinds=kinds, discretizer=discretizer, smoothing=float(smoothing),
                        n_truncated=tr.n_truncated)
    if paired is None:
        paired = replayable(df, BASE_COLUMN)
    return paired_gains(model, frame, discretizer, objective, shaping, columns) if paired else model


def paired_gains(model: TieredModel, frame: pl.DataFrame, discretizer: Discretizer, objective: str, shaping: float,
                 columns: Columns = DEFAULT_COLUMNS) -> TieredModel:
    """``model`` with the agent's and each kind's value per cell read from paired outcomes (module docstring);
    ``frame`` holds the rows' actions (``ACTION``) and the agent's own outcome (``BASE_COLUMN``)."""
    if BASE_COLUMN not in frame.columns or frame[BASE_COLUMN].null_count():
        raise ValueError(f"paired gains need the agent's own outcome ({BASE_COLUMN}) on every row; collect deciding "
                         "after the proposal, or estimate without paired=True")
    episode = frame[columns.episode].rank("dense").cast(pl.Int64).to_numpy() - 1
    length = np.bincount(episode)[episode].astype(np.float64)
    # Decisions are separate questions: success is the mean reward of an episode's decisions, so one unit of reward
    # is 1 / length of success; the objective is the reward, or the success plus ``shaping`` times the reward.
    credit = 1.0 / length
    unit = np.ones_like(length) if objective == "reward" else credit + shaping
    reward = frame[columns.reward].cast(pl.Float64).to_numpy()
    own = frame[BASE_COLUMN].cast(pl.Float64).to_numpy()
    cells = (np.clip(frame[columns.step].cast(pl.Int64).to_numpy(), 0, model.horizon - 1),
             discretizer.transform(frame[columns.score].cast(pl.Float64).to_numpy(), frame[columns.step].to_numpy()))
    action = frame[ACTION].to_numpy()
    rewards = model.rewards.copy()
    success = None if model.success is None else model.success.copy()
    for table, per_row in ((rewards, unit), (success, credit)):
        if table is None:
            continue
        table[:, :, 0] = _shrunk(own * per_row, cells, np.ones(own.size, bool), table.shape[:2])
        for k in range(1, model.n_kinds + 1):
            rows = action == k
            slope = _slope(reward[rows], own[rows])
            mean = _shrunk((reward - slope * own) * per_row, cells, rows, table.shape[:2])
            table[:, :, k] = mean + slope * table[:, :, 0]
    # A decision changes nothing later: the next state is the cell's, whichever action its rows took.
    weights = model.counts[..., None].astype(np.float64) if model.counts is not None else None
    transitions = model.transitions
    if weights is not None:
        seen = weights.sum(axis=2, keepdims=True)
        pooled = np.where(seen > 0, (weights * transitions).sum(axis=2, keepdims=True) / np.maximum(seen, 1e-300),
                          transitions.mean(axis=2, keepdims=True))
        transitions = np.broadcast_to(pooled, transitions.shape).copy()
    return replace(model, rewards=rewards, success=success, transitions=transitions)


def _slope(reward: np.ndarray, own: np.ndarray) -> float:
    """The regression slope of a kind's reward on the agent's own outcome over its rows, in [0, 1] (0 where the
    agent's outcome does not vary there)."""
    spread = float(np.var(own))
    if reward.size < 2 or spread <= 0:
        return 0.0
    return float(np.clip(np.cov(reward, own, bias=True)[0, 1] / spread, 0.0, 1.0))


def _shrunk(value: np.ndarray, cells: tuple[np.ndarray, np.ndarray], rows: np.ndarray,
            shape: tuple[int, int]) -> np.ndarray:
    """(T, S): the mean of ``value`` over each cell's ``rows``, shrunk toward its mean over all ``rows`` by
    ``PAIRED_PRIOR`` rows."""
    total, count = np.zeros(shape), np.zeros(shape)
    np.add.at(total, (cells[0][rows], cells[1][rows]), value[rows])
    np.add.at(count, (cells[0][rows], cells[1][rows]), 1.0)
    return (total + PAIRED_PRIOR * float(value[rows].mean())) / (count + PAIRED_PRIOR)
