"""The trajectory schema refuses bad files with a message naming the file and the column."""

import polars as pl
import pytest

from helper.schema import SCHEMA, SchemaError, read_trajectories, validate, write_shard


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
    back = read_trajectories(tmp_path)
    assert back.equals(frame)
    assert not list(tmp_path.glob(".*tmp")), "temp files must not survive an atomic write"


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "bad.parquet"
    _rows().drop("budget_left").write_parquet(path)
    with pytest.raises(SchemaError, match=r"bad\.parquet.*'budget_left'"):
        read_trajectories(tmp_path)


def test_wrong_type_names_column(tmp_path):
    path = tmp_path / "bad.parquet"
    _rows().with_columns(pl.col("intervened").cast(pl.String)).write_parquet(path)
    with pytest.raises(SchemaError, match=r"bad\.parquet.*'intervened'.*Boolean"):
        read_trajectories(tmp_path)


def test_narrow_ints_and_float_prm_score_accepted():
    frame = _rows().with_columns(pl.col("step").cast(pl.Int32), pl.lit(1).cast(pl.Int32).alias("prm_score"))
    checked = validate(frame)
    assert checked.schema["step"] == pl.Int64 and checked.schema["prm_score"] == pl.Float64


def test_empty_folder_is_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.parquet"):
        read_trajectories(tmp_path)
