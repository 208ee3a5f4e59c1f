"""collect-offline-trajectories --env agile: the AGILE executor and a tiny random LLM policy."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from agile.executor.episode import AgileSource
from agile.rollout import run_episodes
from helper.data.collect import CollectConfig, run
from helper.data.environment import EnvSpec
from helper.stored_config import config_of
from trajectories.manifest import MANIFEST
from trajectories.number_maps import number_map_keys, number_maps
from trajectories.schema import SCHEMA
from trajectories.shards import read_trajectories

from productqa_slice import SLICE

ROOT = SLICE  # the bundled ProductQA slice, so these run on a fresh clone


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def tiny_config(out, **changes) -> CollectConfig:
    values = dict(env="agile", data=str(ROOT), agent="llm", model="tiny", groups=["blades", "camera_lenses"], out=str(out), episodes=4,
                  questions_per_episode=2, shard_size=2, batch_size=2, budget=1, explore_p=[0.0, 1.0],
                  max_new_tokens=6, seed=3)
    return config_of(CollectConfig, values | changes)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("agile") / "traj"
    summary = run(tiny_config(out))
    return out, summary, read_trajectories(out)


def test_one_row_per_decision_point_in_the_schema(collected):
    out, summary, frame = collected
    assert frame.height == summary["decision_points"] == 4 * 2  # one row per question of every episode
    for name, dtype in SCHEMA.items():
        assert frame.schema[name] == dtype, name
    assert set(frame["env"]) == {"productqa"}  # agile is another name for it
    assert frame.group_by("episode_id").agg(pl.col("step").sort()).sort("episode_id")["step"].to_list() == [[0, 1]] * 4
    assert frame.filter(pl.col("done"))["step"].to_list() == [1] * 4
    keys = set(number_map_keys(frame["features"]))
    assert {"memory_top_similarity", "memory_similar_count", "retrieved_tokens"} <= keys
    assert not any(k.startswith("type_") for k in keys)  # the question type is never a feature


def test_advice_rows_are_the_humans_and_follow_the_mixture(collected):
    out, summary, frame = collected
    advice, own = frame.filter(pl.col("intervened")), frame.filter(~pl.col("intervened"))
    assert set(advice["actor"]) == {"human"} and set(advice["action_text"]) == {"[SeekAdvice]"}
    assert set(own["actor"]) == {"base"}
    # explore_p 1.0 spends the budget of 1 at the first question; explore_p 0 never asks.
    per_episode = frame.group_by("episode_id").agg(pl.col("explore_p").first(), pl.col("intervened").cast(int).sum(),
                                                   pl.col("intervened").first().alias("first"))
    assert per_episode.filter(pl.col("explore_p") == 1.0)[["intervened", "first"]].rows() == [(1, True)] * 2
    assert per_episode.filter(pl.col("explore_p") == 0.0)["intervened"].to_list() == [0, 0]
    # Advice is correct by definition (reward 1); success is the episode's accuracy.
    assert advice["reward"].to_list() == [1.0] * advice.height
    means = frame.group_by("episode_id").agg(pl.col("reward").mean(), pl.col("success").first())
    assert means["reward"].to_list() == pytest.approx(means["success"].to_list())
    manifest = json.loads((out / MANIFEST).read_text())
    assert sum(s["human_calls"] for s in manifest["shards"].values()) == summary["human_calls"] == advice.height == 2


def test_a_removed_shard_is_rewritten_identically(collected, tmp_path):
    out, _, frame = collected
    copy = tmp_path / "traj"
    copy.mkdir()
    for path in out.iterdir():
        copy.joinpath(path.name).write_bytes(path.read_bytes())
    manifest = json.loads((copy / MANIFEST).read_text())
    del manifest["shards"]["shard-00001.parquet"]
    manifest["complete"] = False
    (copy / MANIFEST).write_text(json.dumps(manifest))
    (copy / "shard-00001.parquet").unlink()
    run(tiny_config(copy))
    assert read_trajectories(copy).equals(frame)


def test_advice_through_the_loop_reaches_the_executor():
    source = AgileSource(ROOT, "train", ["blades"], model="tiny", max_new_tokens=4)
    (episode,) = source.episodes([0], seed=0, questions_per_episode=3)
    first = episode.observe()
    assert first.env == "productqa" and first.horizon == 3 and "question_type" in first.annotations
    assert "[SeekAdvice]" not in episode.executor.context_text().split("[GetQuestion]")[0]  # not offered to the LLM
    branch = episode.clone()
    (records,) = run_episodes([episode], source.agent(), budget=2, explore_p=1.0)
    sessions = episode.executor.records
    assert [r.advised for r in sessions] == [True, True, False] == [r.intervened for r in records]
    assert all(r.by_gate for r in sessions[:2]) and sessions[2].turns >= 1
    assert episode.success() == pytest.approx(sum(r.correct for r in sessions) / 3)
    assert not branch.executor.records and branch.observe().step == 0  # the clone did not move


@pytest.mark.parametrize("decoding", ["free", "constrained"])
def test_pipeline_runs_every_stage_on_the_agile_stack(tmp_path, decoding):
    """`helpgate pipeline --env agile`: collection, PRM, solve, distill and sweep all through the AGILE
    executor and LLM policy (a tiny model), one decision per question of the session; with
    ``--decoding constrained`` every base answer is yes/no or a query of the table's grammar."""
    from helper.commands.cli import main
    from helper.commands.pipeline import STAGES, PipelineConfig

    out = tmp_path / "agile-run"
    args = ["pipeline", "--env", "agile", "--agent", "tiny", "--prm-model", "tiny", "--out", str(out), "--quick",
            "--data", str(ROOT), "--episodes", "8", "--eval-episodes", "2", "--questions-per-episode", "2",
            "--methods", "helper", "random", "--prm-target", "soft", "--decoding", decoding]
    questions = 2
    if decoding == "constrained":  # it answers "yes" and the slice's sessions open with yes questions: every
        args[args.index("soft")] = "process"  # episode succeeds, while its questions' answers are right or wrong
        args += ["--decide-after", "proposal"]  # the gates read the proposal and its signals, as the main job does
    # The tiny random model is never right, so the default (process) label would have one class; the
    # episode's outcome (soft) still varies with the human's answers. Two questions a session: one
    # answer from the human makes a success (success >= 0.5), so the collection's mixture of
    # explore_p gives both outcomes (with three, 8 episodes all failed on the bundled slice).
    # ProductQA (agile is its other name) decides after the proposal by default: is the proposal right?
    assert PipelineConfig(spec=EnvSpec(env="agile")).prm_target_name() == "proposal"
    assert main(args) == 0
    assert all((out / stage / ".done").exists() for stage in STAGES)
    assert set(read_trajectories(out / "trajectories")["env"]) == {"productqa"}
    target = "label_soft" if decoding == "free" else "label_process"
    assert json.loads((out / "prm" / "metrics.json").read_text())["target"] == target
    helper = pl.read_csv(out / "sweep" / "sweep.csv").filter(pl.col("method") == "helper")
    assert sorted(helper["budget"].to_list()) == list(range(questions + 1))  # up to always's: every question
    assert (helper["interventions"] <= helper["budget"]).all()
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert summary["agent_turns"]["reused_turns"] > 0  # every method replays the same held-out sessions
    trained = json.loads((out / "helper" / "helper.json").read_text())["trained_on"]
    assert trained["env"] == ["productqa"] and trained["horizon"] == questions
    if decoding == "constrained":
        base = read_trajectories(out / "trajectories").filter(pl.col("actor") == "base")["action_text"]
        grammar = re.compile(r"\[SearchProduct\] SELECT product_id FROM `[^`]+` WHERE .+;|\[PredictAnswer\] .+|\[SeekAdvice\]")
        assert base.len() > 0 and all(grammar.fullmatch(t.split("\n", 1)[0]) for t in base), base.to_list()
        # Every proposal carries the policy's own margins (answers: answer_margin as well).
        rows = read_trajectories(out / "trajectories")
        keys = [set(m) for m in number_maps(rows["proposal_signals"])]
        answers = [t.startswith("[PredictAnswer]") for t in rows["proposal_text"]]
        assert any(answers) and all("answer_margin" in k for k, a in zip(keys, answers) if a)
