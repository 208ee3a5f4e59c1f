"""Estimate a ``TieredModel`` from logged rows that name the help they called.

A row's action is read from its ``help_kind`` column: empty (null or "") on the agent's own rows,
else the kind's name (one of ``kinds``) or its index 1 .. K (0 is the agent). Where the row also
has ``intervened``, the two must agree, so a shard whose kind column lost its values is refused
rather than read as the agent acting. The estimator is ``tabular_rl.estimate``'s, run with K + 1
actions (``estimate_tables``), so smoothing, step back-off and the success credit are the same.

**Paired gains** (``paired_gains``), where every row logs the agent's own outcome at its decision whether or not help
replaced it (``proposal_reward``) and decisions are separate questions (an episode's success is the mean of its
rewards: ``tabular_rl.choice.replay.replayable``; ProductQA deciding after the proposal): a row that called kind k
then shows both what k earned and what the agent would have earned on the same decision. A kind's value in a cell
is the agent's value there plus the kind's mean paired gain over the cell's rows of that kind, shrunk toward the
kind's gain pooled over all its rows by ``PAIRED_PRIOR`` rows. The difference of two independent cell means (a
few rows of a kind against the agent's rows) is noise that the solve's maximum over kinds turns into a bias toward
the kind with the fewest rows; the paired difference on the same decisions is not (on ProductQA a majority vote of
the agent's own samples answers as the agent does on most questions: its gain is about zero, where its cells alone
read it better than the agent in some states). On the same premise (a decision changes nothing later) every
action's next state is the cell's, pooled over the actions' rows, so no kind is bought for the noise of its few
rows' next states either.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from ..choice.replay import replayable
from ..discretize import Discretizer
from ..estimate import MissingActionError, check_estimator_weights, estimate_tables
from ..transitions import DEFAULT_COLUMNS, Columns, extract_transitions, with_objective
from .model import TieredModel

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
    """``model`` with each kind's value per cell the agent's value plus the kind's paired gain (module docstring);
    ``frame`` holds the rows' actions (``ACTION``) and the agent's own outcome (``BASE_COLUMN``)."""
    if BASE_COLUMN not in frame.columns or frame[BASE_COLUMN].null_count():
        raise ValueError(f"paired gains need the agent's own outcome ({BASE_COLUMN}) on every row; collect deciding "
                         "after the proposal, or estimate without paired=True")
    episode = frame[columns.episode].rank("dense").cast(pl.Int64).to_numpy() - 1
    length = np.bincount(episode)[episode].astype(np.float64)
    # Decisions are separate questions: success is the mean reward of an episode's decisions, so one unit of reward
    # is 1 / length of success; the objective is the reward, or the success plus ``shaping`` times the reward.
    paired = frame[columns.reward].cast(pl.Float64).to_numpy() - frame[BASE_COLUMN].cast(pl.Float64).to_numpy()
    in_success = paired / length
    step = np.clip(frame[columns.step].cast(pl.Int64).to_numpy(), 0, model.horizon - 1)
    state = discretizer.transform(frame[columns.score].cast(pl.Float64).to_numpy(), frame[columns.step].to_numpy())
    action = frame[ACTION].to_numpy()
    rewards = model.rewards.copy()
    success = None if model.success is None else model.success.copy()
    for k in range(1, model.n_kinds + 1):
        rows = action == k
        in_reward = _shrunk(paired[rows], step[rows], state[rows], rewards.shape[:2])
        in_credit = _shrunk(in_success[rows], step[rows], state[rows], rewards.shape[:2])
        gain = in_reward if objective == "reward" else in_credit + shaping * in_reward
        rewards[:, :, k] = rewards[:, :, 0] + gain
        if success is not None:
            success[:, :, k] = success[:, :, 0] + in_credit
    # A decision changes nothing later: the next state is the cell's, whichever action its rows took.
    weights = model.counts[..., None].astype(np.float64) if model.counts is not None else None
    transitions = model.transitions
    if weights is not None:
        seen = weights.sum(axis=2, keepdims=True)
        pooled = np.where(seen > 0, (weights * transitions).sum(axis=2, keepdims=True) / np.maximum(seen, 1e-300),
                          transitions.mean(axis=2, keepdims=True))
        transitions = np.broadcast_to(pooled, transitions.shape).copy()
    return replace(model, rewards=rewards, success=success, transitions=transitions)


def _shrunk(gain: np.ndarray, step: np.ndarray, state: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(T, S): each cell's mean ``gain``, shrunk toward the mean of every row by ``PAIRED_PRIOR`` rows."""
    total, count = np.zeros(shape), np.zeros(shape)
    np.add.at(total, (step, state), gain)
    np.add.at(count, (step, state), 1.0)
    return (total + PAIRED_PRIOR * float(gain.mean())) / (count + PAIRED_PRIOR)
