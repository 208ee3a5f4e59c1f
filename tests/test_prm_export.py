"""``helpgate prm export --format trl``: TRL's stepwise-supervision layout, the text ``prm train``
renders, and labels checked against the trajectories by brute force."""

from __future__ import annotations

import json
from collections import defaultdict

import polars as pl
import pytest

from helper.cli import main
from helper.collect import CollectConfig, run
from helper.schema import read_trajectories
from prm.render import step_pieces

PLUGIN = {"env": "examples.arith_chain:make_episodes", "agent": "examples.arith_chain:make_agent"}


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "traj"
    run(CollectConfig(**PLUGIN, episodes=60, explore_p=[0.0, 0.5], budget=2, shard_size=30, out=str(out)))
    return out


def _export(trajectories, out, *options) -> list[dict]:
    assert main(["prm", "export", "--data", str(trajectories), "--out", str(out), "--format", "trl", *options]) == 0
    if out.suffix == ".parquet":
        return pl.read_parquet(out).to_dicts()
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_layout_is_the_rendered_episode_text(trajectories, tmp_path):
    rows = _export(trajectories, tmp_path / "d.jsonl")
    frame = read_trajectories(trajectories)
    assert len(rows) == frame["episode_id"].n_unique() == 60
    for row in rows:
        assert set(row) == {"prompt", "completions", "labels", "episode_id", "success"}
        assert isinstance(row["prompt"], str) and all(isinstance(c, str) for c in row["completions"])
        assert all(isinstance(label, bool) for label in row["labels"])
        episode = frame.filter(pl.col("episode_id") == row["episode_id"]).sort("step")
        assert len(row["completions"]) == len(row["labels"]) == episode.height
        # joined by TRL's default step separator, it is the text the PRM is trained on (tags aside)
        rendered = "".join("".join(step_pieces(t, s, a, "action"))
                           for t, (s, a) in enumerate(zip(episode["state_text"], episode["action_text"])))
        assert "\n".join([row["prompt"], *row["completions"]]) == rendered
        assert row["success"] == episode["success"][0]


def test_labels_match_rewards_and_outcomes(trajectories, tmp_path):
    frame = read_trajectories(trajectories)
    episodes = {eid: group.sort("step") for (eid,), group in frame.group_by("episode_id")}
    process = _export(trajectories, tmp_path / "p.parquet", "--target", "process")
    hard = _export(trajectories, tmp_path / "h.jsonl", "--target", "hard")
    soft = _export(trajectories, tmp_path / "s.jsonl")  # default: soft
    for row in process:
        assert row["labels"] == [r >= 0.5 for r in episodes[row["episode_id"]]["reward"]]
    for row in hard:
        assert row["labels"] == [episodes[row["episode_id"]]["success"][0] >= 0.5] * len(row["labels"])
    # soft: mean outcome of every episode whose text up to this step's action is the same
    outcomes = defaultdict(list)
    for row in soft:
        for t in range(len(row["completions"])):
            outcomes["\n".join([row["prompt"], *row["completions"][: t + 1]])].append(row["success"])
    shared = 0
    for row in soft:
        expected = []
        for t in range(len(row["completions"])):
            same = outcomes["\n".join([row["prompt"], *row["completions"][: t + 1]])]
            shared += len(same) > 1
            expected.append(sum(same) / len(same) >= 0.5)
        assert row["labels"] == expected
    assert shared > 0  # some episodes share a prefix: the check above is not only the hard label again


def test_base_only_and_refusals(trajectories, tmp_path, capsys):
    frame = read_trajectories(trajectories)
    clean = set(frame["episode_id"]) - set(frame.filter(pl.col("actor") != "base")["episode_id"])
    rows = _export(trajectories, tmp_path / "b.jsonl", "--base-only")
    assert {row["episode_id"] for row in rows} == clean and 0 < len(clean) < 60
    only_final = tmp_path / "final"
    only_final.mkdir()
    frame.with_columns(pl.when(pl.col("done")).then(pl.col("success")).otherwise(0.0).alias("reward")) \
        .write_parquet(only_final / "shard-00000.parquet")
    capsys.readouterr()
    assert main(["prm", "export", "--data", str(only_final), "--out", str(tmp_path / "x.jsonl"),
                 "--target", "process"]) == 2
    assert "target='process': these trajectories have no step rewards" in capsys.readouterr().err
