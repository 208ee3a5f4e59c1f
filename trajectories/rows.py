"""The one row builder: a decision point as a row of the offline dataset.

``StepRecord.of(observation, ...)`` is how the episode loop (``agile.rollout``) and the recorder
(``helper.data.recorder``) make a row; ``frame_of(records, optional)`` is how collection (in
process and over Ray) and the recorder turn rows into a shard's frame, in ``SCHEMA`` order and types.
A record holds ``features`` and ``proposal_signals`` as dicts of numbers; ``to_row`` gives them in the
column's form (``trajectories.number_maps``), so a frame built from rows has the typed column.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from trajectories.number_maps import NUMBER_MAP_COLUMNS, entries, number_map_column
from trajectories.schema import HELP_COLUMNS, OPTIONAL, SCHEMA


@dataclass
class StepRecord:
    """One decision point: a row of the offline dataset, its fields in ``SCHEMA`` order, then the
    optional columns collection writes (``trajectories.schema``)."""

    episode_id: str
    step: int
    env: str
    task_id: str
    state_text: str
    action_text: str
    actor: str
    intervened: bool
    budget_left: int
    """Interventions still allowed before this decision."""
    reward: float
    done: bool
    success: float
    """The episode's outcome, filled on every row once the episode ends."""
    explore_p: float
    seed: int
    horizon: int
    features: dict[str, float]
    """The observation's features: numbers by name."""
    proposal_text: str = ""
    """What the base agent proposed here (its whole transcript); ``""`` in ``state`` mode."""
    proposal_reward: float | None = None
    """The proposal's immediate reward (on a clone where an intervention replaced it)."""
    proposal_signals: dict[str, float] = field(default_factory=dict)
    """The proposal's final action's ``signals``: numbers by name."""
    cf_base_success: float | None = None
    cf_intervene_success: float | None = None
    help_kind: str | None = None
    """The kind of help this intervention called (several kinds); ``""`` where the agent acted; None: a loop of one
    kind, whose rows name none (``to_row`` leaves the help columns out, as shards of one kind have none)."""
    help_cost: float | None = None
    """What the call cost, in the unit of the episode's budget; 0 where the agent acted; None as ``help_kind``."""

    def to_row(self) -> dict[str, Any]:
        """The record as a row of a shard's frame: the number maps as ``{key, value}`` entries."""
        row = asdict(self)
        for name in NUMBER_MAP_COLUMNS:
            row[name] = entries(row[name], name)
        if self.help_kind is None:  # one kind: no help columns (an empty kind on an intervention would be refused)
            for name in HELP_COLUMNS:
                row.pop(name)
        return row

    @classmethod
    def of(cls, observation, action_text: str, actor: str, intervened: bool, budget_left: int, reward: float,
           done: bool, explore_p: float, seed: int, kind: str | None = None, cost: float | None = None
           ) -> StepRecord:
        """The row of a decision at ``observation`` (an ``agile.protocol.Observation``, read by its
        attributes); ``success`` is 0 until the episode ends. ``kind`` / ``cost``: the help called, if any."""
        return cls(
            episode_id=observation.episode_id, step=int(observation.step), env=observation.env,
            task_id=observation.task_id, state_text=observation.state_text, action_text=str(action_text),
            actor=str(actor), intervened=bool(intervened), budget_left=int(budget_left), reward=float(reward),
            done=bool(done), success=0.0, explore_p=float(explore_p), seed=int(seed),
            horizon=int(observation.horizon), features=dict(observation.features or {}),
            help_kind=None if kind is None else str(kind), help_cost=None if cost is None else float(cost),
        )


def frame_of(records: Iterable[StepRecord], optional: Iterable[str] = ()) -> pl.DataFrame:
    """``records`` as a frame with every ``SCHEMA`` column and the ``optional`` ones, typed."""
    columns = dict(SCHEMA) | {name: OPTIONAL[name] for name in optional}
    records = list(records)
    plain = {name: dtype for name, dtype in columns.items() if name not in NUMBER_MAP_COLUMNS}
    frame = pl.DataFrame({name: [getattr(record, name) for record in records] for name in plain}, schema=plain)
    maps = [number_map_column(name, [getattr(record, name) for record in records])
            for name in columns if name in NUMBER_MAP_COLUMNS]
    return frame.with_columns(maps).select(list(columns))
