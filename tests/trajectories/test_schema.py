"""The trajectory schema refuses bad files with a message naming the file and the column."""

import polars as pl
import pytest

from trajectories.manifest import ConfigMismatch, Manifest
from trajectories.schema import SCHEMA, EmptyDataset, SchemaError, validate
from trajectories.shards import read_shard, read_trajectories, shard_paths, write_shard


# The schema's rules, on folders of bare shards: no manifest, read as they are (tests/helper/evaluation/
# test_complete_collection.py covers the refusal of such folders).
pytestmark = pytest.mark.filterwarnings("ignore:.*--allow-incomplete")


def _rows(n_episodes=2, steps=3):
    rows = []
    for e in range(n_episodes):
        for t in range(steps):
            rows.append(dict(
                episode_id=f"ep{e}", step=t, env="productqa", task_id=f"q{t}",
                state_text=f"state {e} {t}", action_text="[PredictAnswer] yes", actor="base",
                intervened=False, budget_left=2, reward=1.0, done=t == steps - 1,
                success=0.5, explore_p=0.1, seed=e,
            ))
    return pl.DataFrame(rows, schema=SCHEMA)


def test_round_trip_sorted(tmp_path):
    frame = _rows()
    write_shard(frame.reverse(), tmp_path / "shard-00000.parquet")
    back = read_trajectories(tmp_path, allow_incomplete=True)
    assert back.equals(frame)
    assert not list(tmp_path.glob(".*tmp")), "temp files must not survive an atomic write"


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "bad.parquet"
    _rows().drop("budget_left").write_parquet(path)
    with pytest.raises(SchemaError, match=r"bad\.parquet.*'budget_left'"):
        read_trajectories(tmp_path, allow_incomplete=True)


def test_wrong_type_names_column(tmp_path):
    path = tmp_path / "bad.parquet"
    _rows().with_columns(pl.col("intervened").cast(pl.String)).write_parquet(path)
    with pytest.raises(SchemaError, match=r"bad\.parquet.*'intervened'.*Boolean"):
        read_trajectories(tmp_path, allow_incomplete=True)


def test_narrow_ints_and_float_prm_score_accepted():
    frame = _rows().with_columns(pl.col("step").cast(pl.Int32), pl.lit(1).cast(pl.Int32).alias("prm_score"))
    checked = validate(frame)
    assert checked.schema["step"] == pl.Int64 and checked.schema["prm_score"] == pl.Float64


def test_empty_dataset_says_it_is_empty(tmp_path):
    with pytest.raises(EmptyDataset, match="the dataset is empty \\(no \\*.parquet shards\\); collect"):
        read_trajectories(tmp_path, allow_incomplete=True)
    with pytest.raises(FileNotFoundError, match="no such trajectory folder"):
        read_trajectories(tmp_path / "missing", allow_incomplete=True)
    write_shard(_rows().head(0), tmp_path / "shard-00000.parquet")
    with pytest.raises(EmptyDataset, match="no rows in 1 shard\\); collect trajectories first"):
        read_trajectories(tmp_path, allow_incomplete=True)


def test_text_is_never_cast_to_a_number(tmp_path):
    """A step stored as strings is refused (naming file and column), even when every value parses."""
    _rows().with_columns(pl.col("step").cast(pl.String)).write_parquet(tmp_path / "text.parquet")
    with pytest.raises(SchemaError, match=r"text\.parquet: column 'step' has type String, expected an integer"):
        read_trajectories(tmp_path, allow_incomplete=True)
    with pytest.raises(SchemaError, match=r"'reward' has type String, expected a number"):
        validate(_rows().with_columns(pl.col("reward").cast(pl.String)), "x.parquet")
    with pytest.raises(SchemaError, match=r"'step' has type Float64"):  # no narrowing either
        validate(_rows().with_columns(pl.col("step").cast(pl.Float64)), "x.parquet")
    with pytest.raises(SchemaError, match=r"x\.parquet: column 'episode_id' has 1 null"):
        validate(_rows().with_columns(pl.when(pl.col("step") == 0).then(None).otherwise(pl.col("episode_id"))
                                      .alias("episode_id")).head(1), "x.parquet")


def test_truncated_or_corrupt_file_is_named(tmp_path):
    write_shard(_rows(), tmp_path / "good.parquet")
    whole = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(SchemaError, match=r"cut\.parquet: not a readable Parquet file, truncated or corrupt"):
        read_trajectories(tmp_path, allow_incomplete=True)
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(SchemaError, match=r"cut\.parquet: not a readable Parquet file") as error:
        read_shard(tmp_path / "cut.parquet")
    assert "\n" not in str(error.value)


def test_partitioned_folder_skips_hidden_and_temp_files(tmp_path):
    frame = _rows(n_episodes=3)
    write_shard(frame.filter(pl.col("episode_id") != "ep2"), tmp_path / "shard-0.parquet")
    write_shard(frame.filter(pl.col("episode_id") == "ep2"), tmp_path / "env=a" / "shard-1.parquet")
    (tmp_path / ".shard-2.parquet.123.tmp").write_text("half-written")
    (tmp_path / "_scratch").mkdir()
    (tmp_path / "_scratch" / "x.parquet").write_text("not ours")
    assert [p.name for p in shard_paths(tmp_path, allow_incomplete=True)] == ["shard-1.parquet", "shard-0.parquet"]
    assert read_trajectories(tmp_path, allow_incomplete=True).equals(frame)
    # A stage that needs only some columns says which; types are still checked on the others.
    assert read_trajectories(tmp_path, allow_incomplete=True, require=["episode_id", "step"]).height == frame.height


def test_manifest_resumes_refuses_and_restarts(tmp_path):
    out = tmp_path / "t"
    manifest = Manifest.open(out, {"seed": 1})
    write_shard(_rows(), out / "s0.parquet")
    manifest.mark_done("s0.parquet", rows=6)
    again = Manifest.open(out, {"seed": 1})
    assert again.is_done("s0.parquet") and not again.is_done("s1.parquet")
    with pytest.raises(ConfigMismatch, match="seed=1.*seed=2"):
        Manifest.open(out, {"seed": 2})
    with pytest.raises(FileExistsError, match="no other.json"):
        Manifest.open(out, {"seed": 1}, name="other.json")
    # The scoring flavour: a shard rewritten after it was recorded is unfinished; another config restarts.
    scored = Manifest.open(out, {"model": "a"}, name="p.json", on_change="restart", own_folder=False, stamp=True)
    scored.mark_done("s0.parquet", rows=6)
    assert Manifest.open(out, {"model": "a"}, name="p.json", on_change="restart", own_folder=False,
                         stamp=True).is_done("s0.parquet")
    assert not Manifest.open(out, {"model": "b"}, name="p.json", on_change="restart", own_folder=False,
                             stamp=True).is_done("s0.parquet")
    scored = Manifest.open(out, {"model": "a"}, name="p.json", on_change="restart", own_folder=False, stamp=True)
    scored.mark_done("s0.parquet", rows=6)
    write_shard(_rows(steps=4), out / "s0.parquet")
    assert not scored.is_done("s0.parquet")


def test_prm_reads_through_the_same_rules(tmp_path):
    from prm.data.episodes import TRAIN_COLUMNS

    _rows().with_columns(pl.col("step").cast(pl.String)).write_parquet(tmp_path / "text.parquet")
    with pytest.raises(SchemaError, match=r"text\.parquet: column 'step' has type String"):
        read_trajectories(tmp_path, allow_incomplete=True, require=TRAIN_COLUMNS, whole_episodes=True)
    write_shard(_rows(), tmp_path / "text.parquet")
    assert read_trajectories(tmp_path, allow_incomplete=True, require=TRAIN_COLUMNS, whole_episodes=True).height == 6


def test_the_row_builder_is_the_schema():
    """One row schema: ``StepRecord``'s fields are ``SCHEMA``'s columns in order, then optional columns."""
    from dataclasses import fields

    from trajectories.rows import StepRecord
    from trajectories.schema import OPTIONAL, SCHEMA

    names = [f.name for f in fields(StepRecord)]
    assert names[:len(SCHEMA)] == list(SCHEMA)
    assert set(names[len(SCHEMA):]) <= set(OPTIONAL)
