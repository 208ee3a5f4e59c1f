"""Plug-in environments and agents: the example env end to end by its module:factory name, entry
points, refusals that name what is wrong with a factory, and ``--strong human-cli`` through a pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from examples.arith_chain import make_agent, make_episodes
from helper.commands.cli import main
from helper.commands.pipeline import STAGES
from helper.data.environment import EnvConfig, Environment, EnvSetup, EnvSpec
from helper.data.plugins import PluginError, is_plugin, resolve
from trajectories.shards import read_trajectories

REPO = Path(__file__).resolve().parents[3]
ENV = "examples.arith_chain:make_episodes"
AGENT = "examples.arith_chain:make_agent"
NAMES = ["--env", ENV, "--agent", AGENT]


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("chain") / "run"
    args = ["pipeline", "--out", str(out), "--quick", *NAMES, "--prm-model", "tiny", "--episodes", "48",
            "--eval-episodes", "12", "--budgets", "1", "2"]
    assert main(args) == 0
    return out


def test_example_env_runs_every_stage_by_name(pipeline_dir):
    out = pipeline_dir
    for stage in STAGES:
        assert (out / stage / ".done").exists(), stage
    frame = read_trajectories(out / "trajectories")
    assert set(frame["env"]) == {"arith_chain"} and frame["episode_id"].n_unique() == 48
    assert frame["prm_score"].is_between(0.0, 1.0).all()
    assert frame.group_by("episode_id").agg(pl.col("intervened").sum())["intervened"].max() <= 2
    # the rows are the example's own episodes, played by its own agent
    episodes = {e.episode_id: e for e in make_episodes("train", 48, 0)}
    assert set(frame["episode_id"]) == set(episodes)
    assert (frame.filter(pl.col("step") == 0)["state_text"].to_list()
            == [episodes[i].observe().state_text for i in frame.filter(pl.col("step") == 0)["episode_id"]])
    sweep = pd.read_csv(out / "sweep" / "sweep.csv")
    assert {"helper", "never", "always", "first_k", "random"} <= set(sweep["method"])
    # Every row played under its cap C never spends more (the priced helper and *_nocap rows are keyed by a spend).
    capped = sweep[~(sweep["method"].str.endswith("_nocap") | (sweep["method"] == "helper_priced"))]
    assert (capped["interventions"] <= capped["budget"]).all() and sweep["success"].between(0, 1).all()
    # always intervenes at every decision: its budget is the longest held-out episode, and it never fails
    held_out = make_episodes("test", 12, 1000)
    always = sweep[sweep["method"] == "always"].iloc[0]
    assert always["budget"] == max(e.horizon for e in held_out) and always["success"] == 1.0
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert "arith_chain" in summary["skipped"]["exact_optimal"]


def test_report_reads_the_finished_run(pipeline_dir, tmp_path):
    episodes = pd.read_csv(pipeline_dir / "sweep" / "episodes.csv")
    # The example's task ids are its episodes: each episode is its own group.
    assert (episodes["group"] == "test-" + episodes["episode_id"].str.rsplit("-", n=1).str[1]).all()
    stages = json.loads((pipeline_dir / "provenance.json").read_text())["stages"]
    assert set(STAGES) | {"pipeline"} <= set(stages)
    assert stages["pipeline"]["command"][1:3] == ["pipeline", "--out"] and stages["sweep"]["seconds"] > 0
    assert {"describe", "hash", "dirty"} <= set(stages["sweep"]["commit"])
    assert main(["report", str(pipeline_dir), "--out", str(tmp_path / "report.md"), "--resamples", "200"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert re.search(r"\| arith_chain \| 1 \| 12 \| \d+ \+ \d+ \| first_k \|", text) and "| random |" in text  # n + m
    # stages in the order they started: the pipeline first (it holds the others), then its stages
    assert "wall time: pipeline" in text and "collect" in text.split("wall time: pipeline")[1].split(",")[1]
    assert (tmp_path / "report-arith-chain.png").exists()


def test_a_stage_run_alone_records_itself_where_it_writes(pipeline_dir, tmp_path):
    scored = tmp_path / "scored"
    assert main(["prm", "score", "--data", str(pipeline_dir / "trajectories"), "--model", str(pipeline_dir / "prm"),
                 "--out", str(scored), "--device", "cpu", "--no-progress"]) == 0
    assert set(json.loads((scored / "provenance.json").read_text())["stages"]) == {"prm score"}
    assert not (pipeline_dir / "trajectories" / "provenance.json").exists()  # --out, not --data, when given


def test_sweep_command_takes_the_names(pipeline_dir, tmp_path):
    out = tmp_path / "sweep"
    assert main(["sweep", *NAMES, "--helper", str(pipeline_dir / "helper"), "--out", str(out), "--episodes", "6",
                 "--budgets", "0", "1", "--methods", "helper", "first_k", "oracle", "--device", "cpu"]) == 0
    sweep = pd.read_csv(out / "sweep.csv")
    # Sequential decisions: the counterfactual row is the one-step oracle, not an upper bound.
    assert {"helper", "first_k", "oracle_1step", "never", "always"} <= set(sweep["method"])
    # the hindsight oracle (counterfactual clones of the plug-in episodes) is an upper bound of first_k
    at_one = sweep[sweep["budget"] == 1].set_index("method")["success"]
    assert at_one["oracle_1step"] >= at_one["first_k"]
    assert json.loads((out / "provenance.json").read_text())["stages"]["sweep"]["command"][:2] == ["helpgate", "sweep"]


def test_collect_by_name_resumes_and_matches_run_episodes(tmp_path):
    from agile.rollout import run_episodes

    out = tmp_path / "t"
    args = [*NAMES, "--episodes", "10", "--shard-size", "4", "--explore-p", "0", "0.5", "--budget", "1",
            "--seed", "3", "--out", str(out)]
    from helper.data.collect import main as collect

    assert collect(args) == 0
    first = read_trajectories(out)
    (out / "shard-00001.parquet").unlink()  # a lost shard is redone, the same
    assert collect(args) == 0
    assert read_trajectories(out).equals(first)
    episodes = make_episodes("train", 10, 3)
    records = run_episodes(episodes, make_agent(), budget=1, explore_p=[0.0, 0.5] * 5, rng_seed=3)
    expected = [(r.episode_id, r.step, r.action_text, r.intervened, r.success) for rs in records for r in rs]
    got = list(first.select("episode_id", "step", "action_text", "intervened", "success").iter_rows())
    assert sorted(expected) == sorted(got)


def test_entry_points_name_env_and_agent(tmp_path, monkeypatch):
    info = tmp_path / "chain_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: chain-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[helpgate.envs]\nchain = {ENV}\n\n[helpgate.agents]\nchain-base = {AGENT}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    setup = EnvSetup(EnvSpec(env="chain", agent="chain-base"), split="test")
    episodes = setup.episodes(range(3, 6), seed=5)
    assert [e.episode_id for e in episodes] == [e.episode_id for e in make_episodes("test", 6, 5)[3:]]
    assert setup.base_agent().name == "arith-chain-base" and setup.strong_actor() is None
    assert setup.horizon == max(e.horizon for e in episodes)
    with pytest.raises(PluginError, match=r"'chian' is neither an installed helpgate.envs entry point "
                                          r"\(installed: \['chain'\]\)"):
        resolve("chian", "helpgate.envs")


def test_model_names_are_not_plugins():
    assert is_plugin(ENV, "helpgate.envs") and is_plugin(AGENT, "helpgate.agents")
    for name in ("smollm2", "tiny", "HuggingFaceTB/SmolLM2-135M-Instruct", "openai:o3", "/models/my-llm", None):
        assert not is_plugin(name, "helpgate.agents"), name


def test_environment_horizon_is_the_longest_held_out_episode():
    env = Environment(EnvConfig(EnvSpec(env=ENV, agent=AGENT), episodes=20, seed=9))
    assert env.horizon == max(e.horizon for e in make_episodes("test", 20, 9))
    assert env.strong is None and env.base.name == "arith-chain-base"


BAD = '''
from examples.arith_chain import make_episodes

class NoClone:
    episode_id = "x"
    done = False
    def observe(self): ...
    def step(self, action): ...
    def expert_action(self): ...
    def success(self): ...

def as_dict(split, count, seed):
    return {"episodes": make_episodes(split, count, seed)}

def missing_clone(split, count, seed):
    return [NoClone() for _ in range(count)]

def too_few(split, count, seed):
    return make_episodes(split, count, seed)[:-1]

def same_ids(split, count, seed):
    return [make_episodes(split, 1, seed)[0] for _ in range(count)]

class TextObservation(type(make_episodes("train", 1, 0)[0])):
    def observe(self):
        return super().observe().state_text

def plain_text(split, count, seed):
    episodes = make_episodes(split, count, seed)
    for episode in episodes:
        episode.__class__ = TextObservation
    return episodes

def no_act():
    return object()

not_callable = 3
'''


@pytest.mark.parametrize("env, agent, message", [
    ("bad_plugins:as_dict", AGENT, r"bad_plugins:as_dict: returned dict, expected a list of agile.protocol.Episode"),
    ("bad_plugins:missing_clone", AGENT, r"episode 0 \(NoClone\) has no method clone\(\)"),
    ("bad_plugins:too_few", AGENT, r"returned 3 episodes for count=4"),
    ("bad_plugins:same_ids", AGENT, r"episodes 0 and 1 share the episode_id"),
    ("bad_plugins:plain_text", AGENT, r"bad_plugins:plain_text: observe\(\) returned str, expected an agile.protocol"),
    ("bad_plugins:nothing", AGENT, r"module 'bad_plugins' has no attribute 'nothing'"),
    ("bad_plugins:not_callable", AGENT, r"int object is not callable"),
    ("not_a_module_here:make", AGENT, r"module 'not_a_module_here' is not importable"),
    (ENV, "bad_plugins:no_act", r"bad_plugins:no_act: returned object, which has no act\(observations\) method"),
    (ENV, "simulator", r"plug-in environment, which has no built-in simulator"),
    (ENV, "smollm2", r"agent='smollm2' is a built-in agent"),
])
def test_a_bad_factory_is_named_with_what_is_wrong(tmp_path, monkeypatch, env, agent, message):
    (tmp_path / "bad_plugins.py").write_text(BAD)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=message):
        setup = EnvSetup(EnvSpec(env=env, agent=agent))
        setup.episodes(range(4), seed=0)
        setup.base_agent()


def test_a_bad_factory_is_one_line_from_the_command(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "helper.data.collect", "--env", "examples.arith_chain:no_such", "--agent", AGENT,
         "--out", str(tmp_path / "t")], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [(
        "collect-offline-trajectories: error: examples.arith_chain:no_such: module 'examples.arith_chain' has no "
        "attribute 'no_such'. (--debug shows the traceback)")]
    assert not (tmp_path / "t").exists()  # refused before any file is written


def _collect_human(tmp_path, answers: str):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "helper.data.collect", *NAMES, "--strong", "human-cli", "--episodes", "2",
         "--explore-p", "1", "--budget", "1", "--batch-size", "1", "--shard-size", "2", "--out", str(tmp_path / "h")],
        cwd=REPO, input=answers, capture_output=True, text=True, timeout=120, env=env, check=False)


def test_human_cli_asks_through_a_pipe(tmp_path):
    episodes = make_episodes("train", 2, 0)
    result = _collect_human(tmp_path, f"\n41\n  {episodes[1].expert_action().text}  \n")
    assert result.returncode == 0, result.stderr
    for episode in episodes:  # the person saw each state before answering
        assert episode.observe().state_text in result.stderr
    assert result.stderr.count("your action> ") == 3  # the blank line was asked again
    frame = read_trajectories(tmp_path / "h")
    asked = frame.filter(pl.col("step") == 0).sort("episode_id")
    assert asked["actor"].to_list() == ["human", "human"] and asked["intervened"].all()
    assert asked["action_text"].to_list() == ["41", episodes[1].expert_action().text]
    # the answer is played: 41 is wrong at step 0 of episode 0, the expert's answer is right
    assert asked["reward"].to_list() == [float(episodes[0].expert_action().text == "41"), 1.0]
    assert frame.filter(pl.col("step") > 0)["actor"].unique().to_list() == ["base"]


def test_human_cli_end_of_input_is_one_clear_line(tmp_path):
    result = _collect_human(tmp_path, "41\n")
    assert result.returncode == 2
    assert ("collect-offline-trajectories: error: human-cli: standard input ended while episode "
            "'arith_chain-train-0-1' decision 0 waited for an action; give one line per intervention. "
            "(--debug shows the traceback)") in result.stderr.splitlines()
    assert "Traceback" not in result.stderr


def test_pipeline_budget_bound_is_the_plug_in_envs_longest_horizon():
    """Without --budgets the pipeline's budgets run to the plug-in's own longest horizon (not
    TextWorld's), so README's example command runs as written."""
    from examples.arith_chain import make_episodes
    from helper.commands.pipeline import PipelineConfig, _horizon
    from helper.data.plugins import episode_horizon

    cfg = PipelineConfig(spec=EnvSpec(env="examples.arith_chain:make_episodes"), quick=True, seed=3)
    longest = max(episode_horizon(e) for e in make_episodes("train", cfg.sizes()[0], 3))
    assert _horizon(cfg) == longest
    assert longest != 8  # TextWorld's longest quest, the bound used before
