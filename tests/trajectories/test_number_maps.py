"""``features`` and ``proposal_signals`` stored typed (a map of names to numbers per row): dicts to a
column and back, shards of the older JSON-text layout read as typed (alone and beside new ones),
bad cells refused in one line, and the same numbers reaching the helper's classifier and the PRM."""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agile.protocol import Action
from agile.rollout import run_episodes
from examples.arith_chain import ChainAgent, make_episodes
from helper.commands.cli import main
from helper.data.collect import CollectConfig, records_frame, run
from helper.gates.features import default_feature_names, frame_features
from helper.stored_config import config_of
from prm.inputs.signals import signal_keys, signal_matrix, state_keys
from trajectories.number_maps import (NUMBER_MAP, NUMBER_MAP_COLUMNS, number_map_column, number_map_keys,
                                      number_maps)
from trajectories.schema import OPTIONAL, SCHEMA, SchemaError
from trajectories.shards import mark_complete, read_shard, read_trajectories, write_shard

KEYS = st.text(alphabet="abz_:.", min_size=1, max_size=5)
NUMBERS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, -1.0, 1e-300, -2.5e300])
MAPS = st.lists(st.dictionaries(KEYS, NUMBERS, max_size=6), min_size=1, max_size=6)


def _frame(features: list[dict], signals: list[dict]) -> pl.DataFrame:
    """Rows with every ``SCHEMA`` column (episodes of up to 3 steps) and the two maps, typed."""
    n = len(features)
    base = pl.DataFrame({
        "episode_id": [f"e{i // 3:03d}" for i in range(n)], "step": [i % 3 for i in range(n)], "env": ["t"] * n,
        "task_id": [f"q{i}" for i in range(n)], "state_text": [f"s{i}" for i in range(n)], "action_text": ["a"] * n,
        "actor": ["base"] * n, "intervened": [False] * n, "budget_left": [i % 2 for i in range(n)],
        "reward": [1.0] * n, "done": [i % 3 == 2 or i == n - 1 for i in range(n)], "success": [0.5] * n,
        "explore_p": [0.1] * n, "seed": [0] * n, "horizon": [3] * n,
        "prm_score": [(i % 7) / 7 for i in range(n)],
    }, schema=SCHEMA | {name: OPTIONAL[name] for name in ("horizon", "prm_score")})
    return base.with_columns(number_map_column("features", features), number_map_column("proposal_signals", signals))


def _as_json_text(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` in the layout shards had before typed columns: each map as the JSON text the row
    builder wrote (``json.dumps(..., sort_keys=True)``)."""
    return frame.with_columns(
        pl.Series(name, [json.dumps(row, sort_keys=True) for row in number_maps(frame[name])], dtype=pl.String)
        for name in NUMBER_MAP_COLUMNS if name in frame.columns)


def _same(a: list[dict], b: list[dict]) -> bool:
    """Equal dicts, NaN equal to NaN and the sign of a zero kept."""
    def key(value):
        return ("nan",) if math.isnan(value) else (value, math.copysign(1.0, value))
    return [{k: key(v) for k, v in row.items()} for row in a] == [{k: key(v) for k, v in row.items()} for row in b]


@settings(max_examples=60, deadline=None)
@given(MAPS, st.data())
def test_dicts_to_a_column_to_a_shard_and_back(features, data):
    signals = data.draw(st.lists(st.dictionaries(KEYS, NUMBERS, max_size=4), min_size=len(features),
                                 max_size=len(features)))
    frame = _frame(features, signals)
    assert frame.schema["features"] == frame.schema["proposal_signals"] == NUMBER_MAP
    assert _same(number_maps(frame["features"]), features)
    assert number_map_keys(frame["features"]) == sorted(set().union(*features))
    with tempfile.TemporaryDirectory() as folder:
        back = read_shard(write_shard(frame, Path(folder) / "s.parquet"))
        old = Path(folder) / "old.parquet"
        _as_json_text(frame).write_parquet(old)
        from_text = read_shard(old)
    for read in (back, from_text):
        assert read.schema["features"] == read.schema["proposal_signals"] == NUMBER_MAP
        assert _same(number_maps(read["features"]), features) and _same(number_maps(read["proposal_signals"]), signals)


def test_nan_is_kept_and_means_missing_an_infinity_is_refused(tmp_path):
    features = [{"a": math.nan, "b": 1.0}, {"b": -2.0}]
    frame = _frame(features, [{"m": math.nan}, {"m": 0.5}])
    _as_json_text(frame).write_parquet(tmp_path / "old.parquet")  # json.dumps wrote NaN as the token NaN
    for read in (read_shard(write_shard(frame, tmp_path / "new.parquet")), read_shard(tmp_path / "old.parquet")):
        assert _same(number_maps(read["features"]), features)
        # The classifier sees NaN where the value is NaN or the key absent; the PRM flags both missing.
        np.testing.assert_array_equal(frame_features(read, ["f_a", "f_b"]), [[math.nan, 1.0], [math.nan, -2.0]])
        np.testing.assert_array_equal(signal_matrix(read, ["m", "state:a"]), [[0, 0, 1, 1], [0.5, 0, 0, 1]])
    for cell, text in ((math.inf, '{"m": Infinity}'), (-math.inf, '{"m": -Infinity}')):
        with pytest.raises(SchemaError, match=r"^\S*x\.parquet: column 'proposal_signals' row 1 holds 'm': -?inf; "
                                              r"its numbers must be finite .*re-create the shard"):
            write_shard(_frame(features, [{}, {"m": cell}]), tmp_path / "x.parquet")
        old = _frame(features, [{}, {}]).with_columns(pl.Series("proposal_signals", ["{}", text]))
        old.write_parquet(tmp_path / "x.parquet")
        with pytest.raises(SchemaError, match=r"x\.parquet: column 'proposal_signals' row 1 holds 'm'"):
            read_shard(tmp_path / "x.parquet")


@pytest.mark.parametrize("cell", ['{"memory_hits": 1.0', "[1, 2]", '{"a": "high"}', '{"a": {"b": 1}}', "nan"])
def test_a_malformed_old_cell_is_refused_in_one_line(tmp_path, cell):
    frame = _as_json_text(_frame([{"a": 1.0}, {"b": 2.0}, {}], [{}, {}, {}]))
    frame.with_columns(pl.Series("features", ['{"a": 1.0}', cell, "{}"])).write_parquet(tmp_path / "old.parquet")
    with pytest.raises(SchemaError) as error, pytest.warns(UserWarning, match="used anyway"):
        read_trajectories(tmp_path, allow_incomplete=True)  # shards written by hand: no manifest
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'old.parquet'}: column 'features' row 1 is ")
    assert "not a JSON object of numbers" in message
    assert message.endswith("fix or drop that row, or re-create the shard with collect-offline-trajectories.")


def test_other_layouts_are_refused_or_widened(tmp_path):
    frame = _frame([{"a": 1.0}], [{}])
    with pytest.raises(SchemaError, match=r"y\.parquet: column 'features' has type Struct.*expected a map of names "
                                          r"to numbers.*frame_of"):
        write_shard(frame.with_columns(pl.Series("features", [{"a": 1.0}])), tmp_path / "y.parquet")
    twice = pl.Series("features", [[{"key": "a", "value": 1.0}, {"key": "a", "value": 2.0}]], dtype=NUMBER_MAP)
    with pytest.raises(SchemaError, match=r"column 'features' row 0 holds key 'a' twice"):
        write_shard(frame.with_columns(twice), tmp_path / "y.parquet")
    # A map written by another tool (Parquet MAP, integer values) reads as the typed column.
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = frame.drop("features").to_arrow().append_column(
        "features", pa.array([[("a", 3)]], type=pa.map_(pa.string(), pa.int32())))
    pq.write_table(table, tmp_path / "map.parquet")
    read = read_shard(tmp_path / "map.parquet")
    assert read.schema["features"] == NUMBER_MAP and number_maps(read["features"]) == [{"a": 3.0}]


def test_the_same_rows_reach_the_classifier_and_the_prm_identically(tmp_path):
    rng = random.Random(0)
    keys = ["progress", "memory_hits", "steps_left", "neg", "zero"]

    def numbers(pool):
        chosen = rng.sample(pool, rng.randint(0, len(pool)))  # keys vary per row
        return {k: rng.choice([0.0, -0.0, -rng.random() * 5, rng.random(), math.nan, float(rng.randint(-3, 9))])
                for k in chosen}

    frame = _frame([numbers(keys) for _ in range(90)], [numbers(["margin", "entropy", "answer_logprob"])
                                                         for _ in range(90)])
    write_shard(frame, tmp_path / "typed" / "s.parquet")
    (tmp_path / "text").mkdir()
    _as_json_text(frame).write_parquet(tmp_path / "text" / "s.parquet")
    mark_complete(tmp_path / "typed"), mark_complete(tmp_path / "text")
    assert pl.read_parquet(tmp_path / "text" / "s.parquet").schema["features"] == pl.String  # really the old layout
    typed, text = read_trajectories(tmp_path / "typed"), read_trajectories(tmp_path / "text")
    assert typed.equals(text) and typed.select(frame.columns).equals(frame)
    names = default_feature_names(typed)
    assert names == default_feature_names(text) and len(names) == 7 + len(keys)
    np.testing.assert_array_equal(frame_features(typed, names), frame_features(text, names))
    # A frame built in memory with JSON text (never written) is read the same way.
    np.testing.assert_array_equal(frame_features(typed, names), frame_features(_as_json_text(frame), names))
    prm_keys = signal_keys(typed) + state_keys(typed)
    assert prm_keys == signal_keys(text) + state_keys(text) and len(prm_keys) == 3 + len(keys)
    np.testing.assert_array_equal(signal_matrix(typed, prm_keys), signal_matrix(text, prm_keys))
    # What the old JSON parsing gave: json.loads of each cell, float of each value, NaN for an absent key.
    parsed = [json.loads(t) for t in _as_json_text(frame)["features"]]
    reference = np.array([[float(d.get(name[2:], math.nan)) for name in names[7:]] for d in parsed])
    np.testing.assert_array_equal(frame_features(typed, names)[:, 7:], reference)


class SignallingAgent(ChainAgent):
    """The arithmetic agent, saying how sure it is (a signal the PRM may read)."""

    def act(self, observations):
        return [Action(a.text, a.actor, {"sure": -0.5 if o.features["multiply"] else 1.0, "zero": 0.0})
                for a, o in zip(super().act(observations), observations)]


def test_collection_writes_the_typed_columns():
    records = run_episodes(make_episodes("train", 6, 0), SignallingAgent(), budget=1, explore_p=0.5,
                           decide_after="proposal")
    frame = records_frame(records, counterfactual=False)
    assert frame.schema["features"] == frame.schema["proposal_signals"] == NUMBER_MAP
    assert set(number_map_keys(frame["features"])) == {"multiply", "total_digits"}
    assert number_map_keys(frame["proposal_signals"]) == ["sure", "zero"]
    rows = [r for episode in records for r in episode]
    assert number_maps(frame["proposal_signals"]) == [r.proposal_signals for r in rows]
    # Rows as dicts make the same frame (the columns' form is what to_row gives).
    assert pl.DataFrame([r.to_row() for r in rows]).select(frame.columns).equals(frame)


def test_an_old_run_folder_loads_resumes_and_exports_beside_new_shards(tmp_path):
    config = dict(env="examples.arith_chain:make_episodes", agent="examples.arith_chain:make_agent", episodes=40,
                  explore_p=[0.0, 0.5], budget=2, shard_size=10, decide_after="proposal")
    run(config_of(CollectConfig, **config, out=str(tmp_path / "new")))
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    for k in (0, 2):  # two shards as the writer before typed columns left them
        path = tmp_path / "old" / f"shard-0000{k}.parquet"
        _as_json_text(pl.read_parquet(path)).write_parquet(path)
    manifest = json.loads((tmp_path / "old" / "manifest.json").read_text())  # that writer recorded no hashes
    for entry in manifest["shards"].values():
        del entry["sha256"]
    (tmp_path / "old" / "manifest.json").write_text(json.dumps(manifest))
    assert pl.read_parquet(tmp_path / "old" / "shard-00000.parquet").schema["proposal_signals"] == pl.String
    new, mixed = read_trajectories(tmp_path / "new"), read_trajectories(tmp_path / "old")
    assert mixed.schema == new.schema and mixed.equals(new)
    # A resumed collection adds typed shards to the old folder; its summary reads both.
    (tmp_path / "old" / "shard-00003.parquet").unlink()
    assert run(config_of(CollectConfig, **config, out=str(tmp_path / "old")))["episodes"] == 40
    assert read_trajectories(tmp_path / "old").equals(new)
    for name in ("new", "old"):
        assert main(["prm", "export", "--data", str(tmp_path / name), "--out", str(tmp_path / f"{name}.jsonl")]) == 0
    assert (tmp_path / "old.jsonl").read_text() == (tmp_path / "new.jsonl").read_text()
