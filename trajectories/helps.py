"""The kinds of help a collection called, as its manifest records them, and the spend its rows must keep.

A collection with several kinds (``collect-offline-trajectories --help-kinds``) records them in its manifest's
config as ``helps``: one entry per kind, in the order given, ``{"name", "price", "cap", "weight", "actor"}`` (``cap``
null: only the budget limits the kind; ``weight``: its share of the exploration draws; ``actor``: who answers where
the name does not say it, ``NAME=ACTOR:PRICE`` on the command line, null or absent: the name). A folder without the
entry (an older release, a one-kind run, the recorder without kinds) called one kind: the strong actor it names
(``config.strong``; ``"strong"`` where it names none) at price 1, uncapped, and its rows read so
(``trajectories.schema.with_help_defaults``).

- ``kinds_in(config, where)``: the kinds of a manifest's config, a malformed entry refused naming ``where``.
- ``split_actor(text)``: ``"stronger=runs/sft/model"`` -> ``("stronger", "runs/sft/model")``; a plain name -> its
  name and None.
- ``one_kind(config)``: the kind a folder without ``helps`` called.
- ``check_spend(frame, kinds, budget, source)``: no episode spends more than the budget or calls a kind past its cap.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import polars as pl

from trajectories.schema import SchemaError

UNNAMED_STRONG = "strong"
"""The one kind's name where a folder's config names no strong actor (the recorder's)."""
SLACK = 1e-9
"""Costs are sums of prices written with a few decimals: a float sum may pass the budget by rounding alone."""


@dataclass(frozen=True)
class HelpKind:
    """One kind of help as a collection recorded it."""

    name: str
    price: float = 1.0
    cap: int | None = None
    weight: float = 1.0
    actor: str | None = None
    """Who answers (a model, ``openai:MODEL``, a plug-in agent) where the name is not that actor itself."""

    @property
    def who(self) -> str:
        """The actor that answers this kind: ``actor``, else the name."""
        return self.actor or self.name

    def as_entry(self) -> dict:
        entry = asdict(self)
        if entry["actor"] is None:  # a kind named by its actor reads as it did before the field
            del entry["actor"]
        return entry


def split_actor(text: str) -> tuple[str, str | None]:
    """``NAME=ACTOR`` -> (name, actor); a name without ``=`` -> (name, None). The actor keeps any ``=`` of its own."""
    name, sep, actor = text.partition("=")
    return (name, actor) if sep else (text, None)


def one_kind(config: dict) -> HelpKind:
    """The kind a folder of one kind called: its strong actor at price 1."""
    return HelpKind(str(config.get("strong") or UNNAMED_STRONG))


def kinds_in(config: dict, where: str = "manifest.json") -> list[HelpKind]:
    """The kinds a manifest's config records (``helps``), else its one kind."""
    entries = config.get("helps")
    if entries is None:
        return [one_kind(config)]
    redo = "restore the file, or delete the folder and collect again"
    if not isinstance(entries, list) or not entries:
        raise SchemaError(f"{where}: config.helps={entries!r:.60} is not a list of kinds of help; {redo}.")
    kinds = []
    for i, entry in enumerate(entries):
        ok = (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]
              and _number(entry.get("price")) and entry["price"] >= 0
              and (entry.get("cap") is None or (_whole(entry["cap"]) and entry["cap"] >= 0))
              and _number(entry.get("weight", 1.0)) and entry.get("weight", 1.0) > 0
              and (entry.get("actor") is None or (isinstance(entry["actor"], str) and entry["actor"])))
        if not ok:
            raise SchemaError(f"{where}: config.helps[{i}]={entry!r:.80} is not a kind of help (name, price >= 0, cap "
                              f"null or a whole number >= 0, weight > 0, actor null or a name); {redo}.")
        kinds.append(HelpKind(entry["name"], float(entry["price"]), entry.get("cap"), float(entry.get("weight", 1.0)),
                              entry.get("actor")))
    return kinds


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_spend(frame: pl.DataFrame, kinds: list[HelpKind], budget, source) -> None:
    """Refuse (``SchemaError`` naming ``source``) an episode that spent more than ``budget`` or called a kind past its
    cap or not among ``kinds``: rows of another collection, or a loop that overspent."""
    if not {"help_kind", "help_cost", "episode_id"} <= set(frame.columns):
        return
    names = {kind.name for kind in kinds}
    strange = sorted(set(frame["help_kind"].unique().to_list()) - names - {""})
    if strange:
        raise SchemaError(f"{source}: help_kind {strange[0]!r} is not among the collection's kinds {sorted(names)}: "
                          "a shard of another collection; move it out of the folder.")
    spent = frame.group_by("episode_id").agg(pl.col("help_cost").sum())
    if budget is not None and (over := spent.filter(pl.col("help_cost") > float(budget) + SLACK)).height:
        row = over.row(0, named=True)
        raise SchemaError(f"{source}: episode {row['episode_id']!r} spent {row['help_cost']:g} on help, more than the "
                          f"budget {budget}: a shard of another collection; move it out of the folder.")
    for kind in kinds:
        if kind.cap is None:
            continue
        calls = frame.filter(pl.col("help_kind") == kind.name).group_by("episode_id").len()
        if (over := calls.filter(pl.col("len") > kind.cap)).height:
            row = over.row(0, named=True)
            raise SchemaError(f"{source}: episode {row['episode_id']!r} called {kind.name!r} {row['len']} times, past "
                              f"its cap of {kind.cap}: a shard of another collection; move it out of the folder.")
