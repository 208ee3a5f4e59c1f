"""``Recorder``: an agent's own loop writes the shards ``run_episodes`` would, validated, from many
threads at once, and a run killed with SIGKILL resumes with every episode exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

from agile.protocol import HUMAN, STRONG, Observation
from agile.rollout import run_episodes
from examples.arith_chain import make_agent, make_episodes
from helper import Recorder
from trajectories.manifest import MANIFEST, ConfigMismatch, IncompleteCollection
from trajectories.schema import SCHEMA
from trajectories.shards import read_shard, read_trajectories

REPO = Path(__file__).resolve().parents[3]
COMPARED = ["episode_id", "step", "env", "task_id", "state_text", "action_text", "actor", "intervened",
            "budget_left", "reward", "done", "success", "explore_p", "seed", "horizon", "features"]


def play(rec: Recorder, episode, agent, end_with_id: bool = True) -> None:
    """An agent's own loop around one episode, with the recorder deciding interventions."""
    while not episode.done:
        obs = episode.observe()
        action = episode.expert_action() if rec.should_intervene(obs) else agent.act([obs])[0]
        result = episode.step(action)
        rec.log(obs, action.text, action.actor, result.reward)
    rec.end_episode(episode.success(), episode.episode_id if end_with_id else None)


def test_rows_are_what_run_episodes_records(tmp_path):
    episodes = make_episodes("train", 24, 4)
    with Recorder(tmp_path / "r", explore_p=[0.0, 0.3, 0.7], budget=2, seed=11) as rec:
        for episode in episodes:
            play(rec, episode, make_agent())
    frame = read_trajectories(tmp_path / "r")
    assert frame["episode_id"].n_unique() == 24 and frame.height == sum(e.horizon for e in episodes)
    # The same draws (seed, episode_id, step), each episode's p from the recorder: run_episodes agrees row for row.
    ps = dict(frame.group_by("episode_id").agg(pl.col("explore_p").first()).iter_rows())
    assert set(ps.values()) == {0.0, 0.3, 0.7}
    fresh = make_episodes("train", 24, 4)
    records = run_episodes(fresh, make_agent(), budget=2, explore_p=[ps[e.episode_id] for e in fresh], rng_seed=11)
    expected = pl.DataFrame([r.to_row() | {"seed": 11} for rs in records for r in rs]).select(COMPARED)
    assert frame.select(COMPARED).sort("episode_id", "step").equals(expected.sort("episode_id", "step"))
    assert frame["intervened"].sum() > 0 and (frame.filter(pl.col("intervened"))["actor"] == HUMAN).all()
    assert frame.filter(pl.col("done")).height == 24


def test_many_threads_write_the_same_folder_as_one(tmp_path):
    def record(out, workers):
        rec = Recorder(out, explore_p=[0.2, 0.6], budget=1, seed=3, episodes_per_shard=3)
        episodes = make_episodes("train", 30, 8)
        with ThreadPoolExecutor(workers) as pool:  # one episode per thread at a time: end_episode() finds it
            list(pool.map(lambda e: play(rec, e, make_agent(), end_with_id=False), episodes))
        rec.close()
        return read_trajectories(out)

    alone, threaded = record(tmp_path / "one", 1), record(tmp_path / "many", 6)
    assert threaded.select(COMPARED).equals(alone.select(COMPARED))
    assert len(list((tmp_path / "many").glob("*.parquet"))) == 10
    per_episode = threaded.group_by("episode_id").agg(pl.col("intervened").sum(), pl.len())
    assert per_episode["intervened"].max() <= 1 and per_episode.height == 30


def test_refusals_name_the_episode_and_step(tmp_path):
    rec = Recorder(tmp_path / "r", explore_p=[1.0], budget=1, seed=0)
    obs = lambda step, eid="e1": Observation(eid, "mine", "t", step, f"state {step}", 3)
    assert rec.should_intervene(obs(0)) and rec.should_intervene(obs(0))  # asked twice: one decision
    assert rec.budget_left("e1") == 0
    with pytest.raises(ValueError, match="episode 'e1' step 0: should_intervene said yes, but .* actor 'base'"):
        rec.log(obs(0), "a", "base")
    rec.log(obs(0), "a", STRONG, 1.0)
    assert not rec.should_intervene(obs(1))  # the budget is spent
    with pytest.raises(ValueError, match="episode 'e1' step 1: actor 'human' intervenes, but the budget of 1"):
        rec.log(obs(1), "b", HUMAN)
    with pytest.raises(ValueError, match="episode 'e1' step 2: expected step 1"):
        rec.log(obs(2), "b")
    rec.log(obs(1), "b")
    rec.end_episode(1.0)
    with pytest.raises(ValueError, match="episode 'e1' is already recorded"):
        rec.should_intervene(obs(0))
    with pytest.raises(ValueError, match="no open episode"):
        rec.end_episode(0.0, "e2")
    row = read_shard(tmp_path / "r" / "shard-00000.parquet").sort("step")
    assert row["budget_left"].to_list() == [1, 0] and row["intervened"].to_list() == [True, False]
    assert row["done"].to_list() == [False, True] and row["success"].to_list() == [1.0, 1.0]
    with pytest.raises(ConfigMismatch, match="budget=1"):
        Recorder(tmp_path / "r", explore_p=[1.0], budget=2, seed=0)


WRITER = textwrap.dedent('''
    import sys, time
    from examples.arith_chain import make_agent, make_episodes
    from helper import Recorder

    rec = Recorder(sys.argv[1], explore_p=[0.0, 0.3, 0.6], budget=2, seed=5)
    agent = make_agent()
    for episode in make_episodes("train", 40, 2):
        if rec.is_recorded(episode.episode_id):
            continue
        while not episode.done:
            obs = episode.observe()
            action = episode.expert_action() if rec.should_intervene(obs) else agent.act([obs])[0]
            result = episode.step(action)
            rec.log(obs, action.text, action.actor, result.reward)
            time.sleep(0.01)
        rec.end_episode(episode.success())
        print("ended", episode.episode_id, flush=True)
    rec.close()  # the folder is a finished collection
''')


def _write(out: Path, kill_after: int | None) -> int:
    """Run the writer in its own process; SIGKILL it after ``kill_after`` episodes. Returns episodes it ended."""
    script = out.parent / "writer.py"
    script.write_text(WRITER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    process = subprocess.Popen([sys.executable, str(script), str(out)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               text=True)
    ended = 0
    try:
        for line in process.stdout:
            ended += line.startswith("ended")
            if kill_after is not None and ended == kill_after:
                time.sleep(0.015)  # inside the next episode
                os.kill(process.pid, signal.SIGKILL)
                break
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return ended


def test_sigkill_then_resume_gives_every_episode_once_and_prm_trains(tmp_path, one_torch_thread):
    from prm.training.train import TrainConfig, run_train

    out = tmp_path / "killed"
    assert _write(out, kill_after=7) == 7
    # A killed recorder's folder is an unfinished collection: refused, unless the reader allows it.
    with pytest.raises(IncompleteCollection, match="complete: false"):
        read_trajectories(out)
    on_disk = read_trajectories(out, allow_incomplete=True)
    assert on_disk["episode_id"].n_unique() >= 7  # what ended before the kill was written
    assert len(list(out.glob("*.parquet"))) == on_disk["episode_id"].n_unique()
    written = set(on_disk["episode_id"])
    assert Recorder(out, explore_p=[0.0, 0.3, 0.6], budget=2, seed=5).recorded == written

    assert _write(out, kill_after=None) == 40 - len(written)  # the rerun skips what is on disk
    resumed = read_trajectories(out)
    assert resumed["episode_id"].n_unique() == 40
    assert resumed.select("episode_id", "step").is_duplicated().sum() == 0
    assert set(SCHEMA) <= set(resumed.columns)
    assert len(json.loads((out / MANIFEST).read_text())["shards"]) == 40
    assert not list(out.glob(".*.tmp"))

    whole = tmp_path / "whole"
    _write(whole, kill_after=None)
    assert resumed.select(COMPARED).equals(read_trajectories(whole).select(COMPARED))

    metrics = run_train(TrainConfig(data=str(out), out=str(tmp_path / "prm"), model="tiny", head="value",
                                    tag_after="state", head_steps=20, l2=0.01, device="cpu", progress=False))
    assert (tmp_path / "prm").is_dir() and metrics
