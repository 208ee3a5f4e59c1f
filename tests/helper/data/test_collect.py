"""collect-offline-trajectories: shard schema, resumption after SIGKILL, refusal of a changed config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from agile.envs.catalog_generator import default_catalog_dir
from helper.data.collect import CollectConfig, main, run
from helper.config_cli import command_flags
from helper.experiment_options import all_experiment_flags
from helper.stored_config import config_of, flat
from trajectories.manifest import MANIFEST, ConfigMismatch
from trajectories.number_maps import number_maps
from trajectories.schema import SCHEMA
from trajectories.shards import read_shard, read_trajectories

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def catalog():
    return str(default_catalog_dir(seed=0))


def small(catalog, out, **changes) -> CollectConfig:
    values = dict(data=catalog, out=str(out), episodes=10, questions_per_episode=4,
                  shard_size=3, batch_size=4, budget=2, explore_p=[0.0, 0.5, 1.0], seed=7)
    return config_of(CollectConfig, values | changes)


def test_shards_follow_the_schema_and_summary_adds_up(tmp_path, catalog):
    config = small(catalog, tmp_path / "t")
    summary = run(config)
    shards = sorted((tmp_path / "t").glob("*.parquet"))
    assert [p.name for p in shards] == [f"shard-{k:05d}.parquet" for k in range(4)]
    for path in shards:
        frame = read_shard(path)
        assert set(SCHEMA) | {"horizon", "features"} <= set(frame.columns)
    frame = read_trajectories(tmp_path / "t")
    assert frame.height == 10 * 4 == summary["decision_points"]
    assert frame["episode_id"].n_unique() == 10 == summary["episodes"]
    assert frame.group_by("episode_id").agg(pl.col("intervened").sum())["intervened"].max() <= 2
    assert summary["interventions"] == frame["intervened"].sum()
    # the explore_p mixture is assigned round-robin by episode index
    ps = frame.group_by("episode_id").agg(pl.col("explore_p").first()).sort("episode_id")["explore_p"]
    assert sorted(set(ps)) == [0.0, 0.5, 1.0]
    assert frame.filter(pl.col("explore_p") == 0.0)["intervened"].sum() == 0
    manifest = json.loads((tmp_path / "t" / MANIFEST).read_text())
    assert manifest["complete"] and len(manifest["shards"]) == 4
    assert manifest["config"]["seed"] == 7
    features = number_maps(frame["features"])
    assert {frozenset(f) for f in features} == {frozenset({"memory_top_similarity", "memory_similar_count",
                                                          "memory_entries", "retrieved_tokens", "memory_advice_hits"})}
    # Only advice is filed in memory: what a question retrieves from it came from advice.
    assert all(f["memory_advice_hits"] <= f["memory_entries"] for f in features)
    assert max(f["memory_entries"] for f in features) > 0


def test_question_type_is_a_feature_only_with_gold_features(tmp_path, catalog):
    run(small(catalog, tmp_path / "plain", episodes=3))
    run(small(catalog, tmp_path / "gold", episodes=3, gold_features=True))
    plain, gold = read_trajectories(tmp_path / "plain"), read_trajectories(tmp_path / "gold")
    plain_features = number_maps(plain["features"])
    gold_features = number_maps(gold["features"])
    assert not any(k.startswith("type_") for f in plain_features for k in f)
    assert not any("_qa)" in text for text in plain["state_text"])  # nor in the PRM's input text
    for row, features in zip(gold.iter_rows(named=True), gold_features):
        qtype = row["task_id"].split("/")[-1].rsplit("_", 1)[0]  # ProductQA ids are <type>_<n>
        assert features[f"type_{qtype}"] == 1.0
    # The switch adds the indicators and changes nothing else the agent does.
    assert [{k: v for k, v in f.items() if not k.startswith("type_")} for f in gold_features] == plain_features
    assert gold["action_text"].to_list() == plain["action_text"].to_list()
    with pytest.raises(ConfigMismatch, match="gold_features"):  # one folder, one feature set
        run(small(catalog, tmp_path / "plain", episodes=3, gold_features=True))


def test_counterfactual_columns(tmp_path, catalog):
    run(small(catalog, tmp_path / "cf", episodes=3, counterfactual=True, explore_p=[0.0]))
    frame = read_trajectories(tmp_path / "cf")
    assert frame["cf_base_success"].null_count() == 0
    assert (frame["cf_base_success"] == frame["success"]).all()  # no interventions: the run itself


def test_changed_config_is_refused_naming_the_field(tmp_path, catalog, capsys):
    out = tmp_path / "t"
    run(small(catalog, out, episodes=4))
    with pytest.raises(ConfigMismatch, match="budget"):
        run(small(catalog, out, episodes=4, budget=3))
    code = main(["--data", catalog, "--out", str(out), "--episodes", "5", "--questions-per-episode", "4"])
    assert code == 2 and "episodes" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="manifest"):
        run(small(catalog, foreign))


def test_other_envs_fields_stay_out_of_the_manifest(tmp_path, catalog):
    run(small(catalog, tmp_path / "t", episodes=2))
    stored = json.loads((tmp_path / "t" / MANIFEST).read_text())["config"]
    assert stored["env"] == "productqa" and not [k for k in stored if k.startswith("tw_")]
    with pytest.raises(ValueError, match="tw_sim_p"):
        run(small(catalog, tmp_path / "tw", env="textworld", tw_sim_p=1.5))


def _cli(catalog, out, episodes):
    # --counterfactual (slow shards, and their branch columns resumed too) is an experiment's option: its entry.
    return [sys.executable, str(REPO / "benchmarks" / "experiment.py"), "collect", "--data", catalog, "--out", str(out),
            "--episodes", str(episodes), "--questions-per-episode", "4", "--shard-size", "25",
            "--batch-size", "25", "--budget", "2", "--explore-p", "0.1", "0.4", "--seed", "3",
            "--counterfactual"]


def _done_shards(out: Path) -> int:
    try:
        return len(json.loads((out / MANIFEST).read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def test_sigkill_then_resume_equals_uninterrupted(tmp_path, catalog):
    episodes = 400  # 16 shards: long enough to be killed in the middle
    env = dict(os.environ, PYTHONPATH=str(REPO))
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cli(catalog, killed, episodes), cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while _done_shards(killed) < 1 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = _done_shards(killed)
    assert 1 <= partial < 16, proc.stderr.read().decode()  # killed in the middle of the run
    print(f"killed after {partial} of 16 shards")
    # resume with the same arguments, in a fresh process
    done = subprocess.run(_cli(catalog, killed, episodes), cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    reference = tmp_path / "reference"
    run(config_of(CollectConfig, data=catalog, out=str(reference), episodes=episodes, questions_per_episode=4,
                  shard_size=25, batch_size=25, budget=2, explore_p=[0.1, 0.4], seed=3, counterfactual=True))
    resumed, uninterrupted = read_trajectories(killed), read_trajectories(reference)
    assert resumed.height == episodes * 4
    assert resumed.select("episode_id", "step").is_duplicated().sum() == 0
    assert resumed.equals(uninterrupted)
    assert not list(killed.glob(".*.tmp"))
    # a run that is already complete does nothing and changes nothing
    again = subprocess.run(_cli(catalog, killed, episodes), cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    assert again.returncode == 0 and read_trajectories(killed).equals(uninterrupted)


def test_help_lists_every_field(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    hidden, shown = all_experiment_flags(CollectConfig), command_flags(CollectConfig)
    assert all(flag in text for flag in shown)
    for name in flat(CollectConfig()):  # the nested EnvSpec's fields are flags of their own
        assert (f"--{name.replace('_', '-')}" in shown) != (name in hidden), name  # hidden: the experiment entry's
    assert "--spec" not in text


def test_agent_dtype_reaches_the_llm_and_the_manifest(tmp_path, catalog):
    """--agent-dtype bfloat16 loads the base agent's weights in bfloat16, is part of the collection's
    identity (a resume with other weights is refused), and is refused where no local LLM plays."""
    import torch

    from helper.data.collect import env_setup

    config = small(catalog, tmp_path / "bf16", agent="llm", model="tiny", agent_dtype="bfloat16", episodes=2)
    assert env_setup(config).base_agent().policy.model.dtype == torch.bfloat16
    auto = replace(config, spec=replace(config.spec, agent_dtype="auto"))
    assert env_setup(auto).base_agent().policy.model.dtype == torch.float32  # CPU default
    run(config)
    assert read_trajectories(tmp_path / "bf16").height == 2 * 4
    assert json.loads((tmp_path / "bf16" / MANIFEST).read_text())["config"]["base_agent"] == "tiny"  # --agent llm
    with pytest.raises(ConfigMismatch, match="agent_dtype"):
        run(replace(config, spec=replace(config.spec, agent_dtype="float32")))
    with pytest.raises(ValueError, match="agent_dtype='bfloat16'.*agent='simulator'"):
        run(small(catalog, tmp_path / "sim", agent_dtype="bfloat16"))


def test_collect_says_which_base_agent_it_runs_first_and_records_it(tmp_path, catalog, capsys):
    """The simulator is collect's default (the pipeline's is the embedded LLM): both commands say so on their
    first line, and the manifest names the base agent; a folder from before it was recorded still resumes."""
    from helper.commands.cli import main as helpgate

    out = tmp_path / "t"
    args = ["--data", catalog, "--out", str(out), "--episodes", "2", "--questions-per-episode", "2"]
    assert main(args) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("[collect] base agent simulator: a scripted agent") and "--agent smollm2" in first
    assert first.endswith("strong actor human")
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["config"]["base_agent"] == "simulator"
    del manifest["config"]["base_agent"]  # as a folder collected before the field was recorded
    (out / MANIFEST).write_text(json.dumps(manifest))
    assert helpgate(["collect", *args]) == 0  # resumes (nothing left to do) and records it
    assert capsys.readouterr().out.splitlines()[0] == first
    assert json.loads((out / MANIFEST).read_text())["config"]["base_agent"] == "simulator"


def test_the_command_records_its_provenance(tmp_path, catalog):
    out = tmp_path / "t"
    assert main(["--data", catalog, "--out", str(out), "--episodes", "2", "--questions-per-episode", "2"]) == 0
    entry = json.loads((out / "provenance.json").read_text())["stages"]["collect"]
    assert entry["command"][:3] == ["collect-offline-trajectories", "--data", catalog]
    assert entry["seconds"] >= 0 and entry["machine"]["cores"] >= 1 and "dirty" in entry["commit"]
    assert read_trajectories(out)["episode_id"].n_unique() == 2  # the file beside the shards is not a shard
