"""The help columns (tiered help): shards that name the kind round-trip, shards of older releases read as
one kind named by the strong actor, and a wrong type, a lost value or an overspent episode is refused naming the
file and the column."""

import json

import polars as pl
import pytest

from agile.protocol import Observation
from trajectories.helps import HelpKind, kinds_in
from trajectories.manifest import helps_of
from trajectories.rows import StepRecord, frame_of
from trajectories.schema import HELP_COLUMNS, SchemaError, with_help_defaults
from trajectories.shards import mark_complete, read_shard, read_trajectories, write_shard

CALLS = ("", "compute", "", "human")
PRICES = {"": 0.0, "compute": 1.0, "human": 4.0}


def rows(episode: str, calls=CALLS, kinds: bool = True) -> pl.DataFrame:
    records = []
    for step, kind in enumerate(calls):
        obs = Observation(episode, "env", "task", step, f"state {step}", len(calls))
        records.append(StepRecord.of(obs, "act", "strong" if kind else "base", bool(kind), 6, 1.0,
                                     step == len(calls) - 1, 0.5, 0, kind=kind, cost=PRICES.get(kind, 1.0)))
    return frame_of(records, ("horizon", *(HELP_COLUMNS if kinds else ())))


def test_a_shard_that_names_its_kinds_round_trips(tmp_path):
    frame = rows("e0")
    back = read_shard(write_shard(frame, tmp_path / "s.parquet"))
    assert back.equals(frame)
    assert back["help_kind"].to_list() == list(CALLS)
    assert back["help_cost"].to_list() == [0.0, 1.0, 0.0, 4.0]


def test_an_older_shard_reads_as_one_kind_named_by_the_strong_actor(tmp_path):
    old = rows("e0", kinds=False)
    assert not set(HELP_COLUMNS) & set(old.columns)
    back = read_shard(write_shard(old, tmp_path / "old.parquet"))
    assert back.equals(old)  # read as it was written: nothing invented
    one = with_help_defaults(back, "stronger")
    assert one["help_kind"].to_list() == ["", "stronger", "", "stronger"]
    assert one["help_cost"].to_list() == [0.0, 1.0, 0.0, 1.0]
    assert with_help_defaults(rows("e1"), "stronger").equals(rows("e1"))  # a shard naming its kinds keeps them


def test_a_folder_of_old_and_new_shards_reads_the_old_rows_as_its_strong_actor(tmp_path):
    write_shard(rows("e0", kinds=False), tmp_path / "a.parquet")
    write_shard(rows("e1", calls=("", "human:cli", "")), tmp_path / "b.parquet")
    mark_complete(tmp_path, {"strong": "human:cli", "budget": 6})
    frame = read_trajectories(tmp_path)
    assert frame.filter(pl.col("episode_id") == "e0")["help_kind"].to_list() == ["", "human:cli", "", "human:cli"]
    assert helps_of(tmp_path) == [HelpKind("human:cli", 1.0, None, 1.0)]


def test_an_older_folder_is_one_kind_and_a_tiered_one_lists_its_kinds(tmp_path):
    assert helps_of(tmp_path) == [HelpKind("strong")]  # no manifest: the unnamed strong actor
    assert kinds_in({"strong": "human"}) == [HelpKind("human")]
    entries = [HelpKind("compute", 1.0).as_entry(), HelpKind("human", 4.0, cap=1, weight=2.0).as_entry()]
    write_shard(rows("e0"), tmp_path / "a.parquet")
    mark_complete(tmp_path, {"strong": "human", "budget": 6, "helps": entries})
    assert helps_of(tmp_path) == [HelpKind("compute", 1.0), HelpKind("human", 4.0, 1, 2.0)]
    assert read_trajectories(tmp_path)["help_kind"].to_list() == list(CALLS)


@pytest.mark.parametrize("column, values, expected", [
    ("help_kind", [0, 1, 0, 2], "column 'help_kind' has type Int64, expected String"),
    ("help_cost", ["0", "1", "0", "4"], "column 'help_cost' has type String, expected a number"),
    ("help_kind", ["", None, "", "human"], "column 'help_kind' has 1 null values"),
    ("help_cost", [0.0, float("inf"), 0.0, 4.0], "column 'help_cost' holds inf"),
    ("help_cost", [0.0, -1.0, 0.0, 4.0], "column 'help_cost' holds -1.0"),
    ("help_kind", ["", "", "", "human"], "column 'help_kind' is '' on a row with intervened=True"),
    ("help_kind", ["compute", "compute", "", "human"],
     "column 'help_kind' is 'compute' on a row with intervened=False"),
    ("help_cost", [0.5, 1.0, 0.0, 4.0], "column 'help_cost' is 0.5 on a row that called no help"),
])
def test_a_wrong_type_or_value_is_refused_naming_the_file_and_column(tmp_path, column, values, expected):
    path = tmp_path / "bad.parquet"
    rows("e0").with_columns(pl.Series(column, values)).write_parquet(path)
    with pytest.raises(SchemaError) as refused:
        read_shard(path)
    message = str(refused.value)
    assert str(path) in message and expected in message and "\n" not in message


def test_a_complete_folder_whose_episode_overspends_or_passes_a_cap_is_refused(tmp_path):
    write_shard(rows("e0"), tmp_path / "a.parquet")  # spends 5
    entries = [HelpKind("compute", 1.0).as_entry(), HelpKind("human", 4.0, cap=1).as_entry()]
    mark_complete(tmp_path, {"budget": 4, "helps": entries})
    with pytest.raises(SchemaError, match="'e0' spent 5 on help, more than the budget 4"):
        read_trajectories(tmp_path)
    write_shard(rows("e0", calls=("human", "human")), tmp_path / "a.parquet")  # spends 8, within a budget of 8
    mark_complete(tmp_path, {"budget": 8, "helps": entries})
    with pytest.raises(SchemaError, match="called 'human' 2 times, past its cap of 1"):
        read_trajectories(tmp_path)


def test_a_malformed_kinds_entry_in_the_manifest_is_refused_naming_it(tmp_path):
    write_shard(rows("e0"), tmp_path / "a.parquet")
    mark_complete(tmp_path, {"helps": [{"name": "human", "price": "4"}]})
    with pytest.raises(SchemaError, match=r"manifest.json: config.helps\[0\]=.* is not a kind of help"):
        helps_of(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["complete"] is True
