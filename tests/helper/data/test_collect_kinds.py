"""``collect-offline-trajectories --help-kinds``: the rows name the kind each call was and its cost, the manifest
the kinds, prices and caps; a kind is the episodes' own or a named actor; a killed collection resumes to the same
bytes; a changed kind is refused on resume and a bad flag in one line. On the tiered rapids (plain Python)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from one_line_errors import one_error_line

from examples.tiered_rapids import KINDS
from helper.data.collect import main as collect
from trajectories.helps import HelpKind
from trajectories.manifest import MANIFEST, helps_of
from trajectories.shards import read_trajectories

REPO = Path(__file__).resolve().parents[3]
ENV = ["--env", "examples.tiered_rapids:make_episodes", "--agent", "examples.tiered_rapids:make_agent"]
KIND_FLAGS = ["--help-kinds", "compute:1", "stronger:2", "human:4"]


def args(out: Path, *extra: str, episodes: int = 60, kinds=KIND_FLAGS) -> list[str]:
    return [*ENV, *kinds, "--episodes", str(episodes), "--shard-size", "20", "--batch-size", "20", "--budget", "6",
            "--explore-p", "0.2", "0.6", "--seed", "3", "--out", str(out), *extra]


def test_rows_name_their_kind_and_cost_and_the_manifest_the_kinds(tmp_path, capsys):
    out = tmp_path / "out"
    assert collect(args(out, "--help-caps", "human=1", "--help-weights", "compute=2")) == 0
    printed = capsys.readouterr().out
    assert "kinds of help compute at 1, stronger at 2, human at 4 (cap 1)" in printed
    assert "help calls by kind: compute" in printed
    rows = read_trajectories(out)
    called = rows.filter(pl.col("help_kind") != "")
    assert set(called["help_kind"]) == set(KINDS)
    assert called["help_cost"].to_list() == [float(KINDS[k].price) for k in called["help_kind"]]
    per_episode = rows.group_by("episode_id").agg(pl.col("help_cost").sum(), (pl.col("help_kind") == "human").sum())
    assert per_episode["help_cost"].max() <= 6 and per_episode["help_kind"].max() <= 1
    assert helps_of(out) == [HelpKind("compute", 1.0, None, 2.0), HelpKind("stronger", 2.0), HelpKind("human", 4.0, 1)]


def test_a_kind_named_as_an_actor_plays_as_the_episodes_own_kind(tmp_path):
    own, named = tmp_path / "own", tmp_path / "named"
    assert collect(args(own)) == 0
    actor = "examples.tiered_rapids:make_stronger"
    assert collect(args(named, kinds=["--help-kinds", "compute:1", f"{actor}:2", "human:4"])) == 0
    a, b = read_trajectories(own), read_trajectories(named)
    assert (b["help_kind"] == actor).any()
    assert a.equals(b.with_columns(pl.col("help_kind").replace(actor, "stronger")))


def test_a_kind_named_apart_from_its_actor_keeps_its_name_and_the_manifest_both(tmp_path):
    own, renamed = tmp_path / "own", tmp_path / "renamed"
    assert collect(args(own)) == 0
    actor = "examples.tiered_rapids:make_stronger"
    assert collect(args(renamed, kinds=["--help-kinds", "compute:1", f"stronger={actor}:2", "human:4"])) == 0
    assert read_trajectories(own).equals(read_trajectories(renamed))  # the same actor answers, under the same name
    assert helps_of(renamed)[1] == HelpKind("stronger", 2.0, actor=actor)
    entries = json.loads((renamed / MANIFEST).read_text())["config"]["helps"]
    assert entries[1]["actor"] == actor and "actor" not in entries[0]  # a kind named by its actor reads as before


def test_a_changed_kind_is_refused_on_resume_naming_it(tmp_path, capsys):
    out = tmp_path / "out"
    assert collect(args(out)) == 0
    capsys.readouterr()
    assert collect(args(out, kinds=["--help-kinds", "compute:1", "stronger:3", "human:4"])) == 2
    line = one_error_line(capsys)
    assert "help_kinds=['compute:1', 'stronger:2', 'human:4']" in line and "stronger:3" in line


def test_one_kind_writes_the_shards_it_always_wrote_and_an_older_folder_resumes(tmp_path):
    out = tmp_path / "one"
    assert collect(args(out, kinds=[])) == 0
    rows = read_trajectories(out)
    assert not {"help_kind", "help_cost"} & set(rows.columns) and rows["intervened"].any()
    assert helps_of(out) == [HelpKind("human")]  # the strong actor, at price 1
    # A folder of an older release records no help_* fields: with the same arguments it resumes, not refused.
    manifest = json.loads((out / MANIFEST).read_text())
    for name in ("help_kinds", "help_caps", "help_weights"):
        del manifest["config"][name]
    manifest["complete"] = False
    (out / MANIFEST).write_text(json.dumps(manifest))
    assert collect(args(out, kinds=[])) == 0 and read_trajectories(out).equals(rows)


@pytest.mark.parametrize("flags, refused", [
    (["--help-kinds", "human"], "--help-kinds 'human': give each kind as NAME:PRICE"),
    (["--help-kinds", "human:four"], "price 'four' is not a number"),
    (["--help-kinds", "human:-1"], "price '-1' must be a finite number >= 0"),
    (["--help-kinds", "human:nan"], "price 'nan' must be a finite number >= 0"),
    (["--help-kinds", "human:1.2345"], "at most 3 decimals"),
    (["--help-kinds", "human:1", "human:2"], "'human' is given twice"),
    (["--help-kinds", "human:7"], "a call costs 7, more than --budget 6"),
    (["--help-kinds", "human:4", "--help-caps", "compute=1"], "'compute' is not among --help-kinds (human)"),
    (["--help-kinds", "human:4", "--help-caps", "human=0"], "never called; drop it"),
    (["--help-kinds", "human:4", "--help-caps", "human=one"], "a cap is a whole number of calls"),
    (["--help-kinds", "human:4", "--help-caps", "human"], "give KIND=CALLS"),
    (["--help-kinds", "human:4", "--help-weights", "human=0"], "never drawn"),
    (["--help-caps", "human=1"], "--help-caps needs --help-kinds"),
    (["--help-kinds", "human:4", "--strong", "human-cli"], "--strong human-cli names the one strong actor"),
    (["--help-kinds", "oracle:1"], "--help-kinds oracle:1: 'oracle' is not one of the episodes' own kinds "
                                   "(compute, stronger, human"),
    (["--help-kinds", "nowhere.module:factory:1"], "module 'nowhere.module' is not importable"),
    (["--help-kinds", "person=human:4"], "the human answer under their own names; give it as human:4"),
    (["--help-kinds", "cheap=compute:1"], "give it as compute:1"),
    (["--help-kinds", "stronger=:2"], "give each kind as NAME:PRICE or NAME=ACTOR:PRICE"),
    (["--help-kinds", "helper=nowhere.module:factory:1"], "module 'nowhere.module' is not importable"),
])
def test_a_bad_flag_is_refused_in_one_line_before_any_file(tmp_path, capsys, flags, refused):
    out = tmp_path / "out"
    assert collect([*ENV, "--episodes", "4", "--budget", "6", "--out", str(out), *flags]) == 2
    line = one_error_line(capsys)
    assert refused in line, line
    assert not out.exists() or not any(out.glob("*.parquet"))


def test_counterfactual_branches_are_refused_with_kinds(tmp_path, capsys):
    # --counterfactual is an experiment's option (helper.experiment_options): on the experiment entry's line.
    from helper.commands.cli import main as helpgate

    out = tmp_path / "out"
    argv = ["collect", *ENV, "--episodes", "4", "--budget", "6", "--out", str(out), "--help-kinds", "human:4"]
    assert helpgate([*argv, "--counterfactual"], experiments=True) == 2
    assert "without --counterfactual" in one_error_line(capsys)
    assert not out.exists() or not any(out.glob("*.parquet"))


KIND_PLUGINS = """
from examples.rapids import RapidsEpisode, make_episodes as rapids


def _as(cls):
    return lambda split, count, seed: [cls(e.episode_id, e.task_id, e.risks, e.markers, e.texts)
                                       for e in rapids(split, count, seed)]


class NoKindArgument(RapidsEpisode):
    help_kinds = ("compute",)


class KindsAsText(RapidsEpisode):
    help_kinds = "compute"


no_kind_argument, kinds_as_text = _as(NoKindArgument), _as(KindsAsText)
"""


@pytest.mark.parametrize("env, refused", [
    ("kindplug:no_kind_argument", "kindplug:no_kind_argument: episode 0 lists help_kinds ['compute'] but its "
                                  "expert_action() takes no kind"),
    ("kindplug:kinds_as_text", "kindplug:kinds_as_text: episode 0 has help_kinds='compute'; list the kinds"),
])
def test_an_episode_that_offers_kinds_it_cannot_answer_is_refused_in_one_line(tmp_path, monkeypatch, capsys, env,
                                                                                refused):
    (tmp_path / "kindplug.py").write_text(KIND_PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    assert collect(["--env", env, "--agent", "examples.tiered_rapids:make_agent", "--help-kinds", "compute:1",
                    "--episodes", "4", "--budget", "2", "--out", str(out)]) == 2
    assert refused in one_error_line(capsys)
    assert not any(out.glob("*.parquet"))


def _done_shards(folder: Path) -> int:
    try:
        return len(json.loads((folder / MANIFEST).read_text())["shards"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def test_a_killed_collection_resumes_to_the_same_bytes(tmp_path):
    episodes, shards = 800, 40  # a plug-in factory builds episodes 0..i for episode i: more would be slow
    command = [sys.executable, "-m", "helper.data.collect", *args(tmp_path / "killed", episodes=episodes)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while _done_shards(tmp_path / "killed") < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = _done_shards(tmp_path / "killed")
    assert 2 <= partial < shards, proc.stderr.read().decode()  # killed in the middle of the run
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert collect(args(tmp_path / "reference", episodes=episodes)) == 0
    killed, reference = (sorted((tmp_path / name).glob("*.parquet")) for name in ("killed", "reference"))
    assert [p.name for p in killed] == [p.name for p in reference] and len(killed) == shards
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(killed, reference))
    manifests = [json.loads((tmp_path / name / MANIFEST).read_text()) for name in ("killed", "reference")]
    assert manifests[0]["shards"] == manifests[1]["shards"] and manifests[0]["config"]["helps"]
