"""Plug-ins cannot hang or fool a run (``helper.data.plugin_limits``): a call past ``--plugin-timeout-s`` and an
episode past its horizon stop the run naming them; a plug-in's ``sys.exit``, its own ``KeyboardInterrupt``, a
``success()`` of None, a class where an instance is due and ids that collide across batches are one line naming it,
while the user's Ctrl-C still stops the run (exit 130); errors in ``trajectories/`` are the project's, not a
plug-in's; ``collect-offline-trajectories --help | head -1`` prints no traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from one_line_errors import one_error_line

from helper.data.collect import main as collect

REPO = Path(__file__).resolve().parents[3]
AGENT = "examples.arith_chain:make_agent"
ENV = "examples.arith_chain:make_episodes"

PLUGINS = (Path(__file__).resolve().parents[2] / "misbehaving_plugins.py").read_text()
"""The misbehaving plug-ins, written as ``misbehaving.py`` where the runs import them."""


@pytest.fixture()
def plugins(tmp_path, monkeypatch):
    (tmp_path / "misbehaving.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def run_collect(out: Path, env: str = ENV, agent: str = AGENT, *extra: str) -> int:
    return collect(["--env", env, "--agent", agent, "--episodes", "4", "--shard-size", "4", "--batch-size", "2",
                    "--explore-p", "0.5", "--out", str(out), *extra])


@pytest.mark.parametrize("env, agent, named", [
    ("misbehaving:exits", AGENT, "misbehaving:exits: the factory called sys.exit(0)"),
    ("misbehaving:interrupts", AGENT, "misbehaving:interrupts: the factory raised KeyboardInterrupt itself"),
    ("misbehaving:no_outcome", AGENT,
     "misbehaving:no_outcome: episode 'arith_chain-train-0-0' success() returned None"),
    (ENV, "misbehaving:agent_class", "misbehaving:agent_class: returned the class ChainAgent, not an agent"),
])
def test_a_plug_ins_exit_interrupt_or_wrong_return_is_one_line_naming_it(plugins, tmp_path, capsys, env, agent, named):
    out = tmp_path / "out"
    assert run_collect(out, env, agent) == 2
    line = one_error_line(capsys)
    assert named in line and "internal error" not in line
    assert not list(out.glob("*.parquet")) and not json.loads((out / "manifest.json").read_text())["complete"]


def test_a_plug_ins_own_interrupt_is_named_whatever_sigint_handler_the_process_had(plugins, tmp_path, capsys):
    # A library may have installed its own SIGINT handler before the command runs: the plug-in's KeyboardInterrupt is
    # still told from a Ctrl-C, and the library's handler is the process's again afterwards.
    calls = []

    def library_handler(signum, frame):
        calls.append(signum)

    before = signal.signal(signal.SIGINT, library_handler)
    try:
        assert run_collect(tmp_path / "out", "misbehaving:interrupts") == 2
        assert "raised KeyboardInterrupt itself" in one_error_line(capsys)
        assert signal.getsignal(signal.SIGINT) is library_handler and not calls
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # ignored: no KeyboardInterrupt can be a Ctrl-C
        assert run_collect(tmp_path / "out2", "misbehaving:interrupts") == 2
        assert "raised KeyboardInterrupt itself" in one_error_line(capsys)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("env, named", [
    ("misbehaving:int_ids", "misbehaving:int_ids: episode 0 has the episode_id 1000 (int); an episode_id is a "
                            "non-empty str"),
    ("misbehaving:negative_step", "misbehaving:negative_step: episode 'arith_chain-train-0-0' observe() returned "
                                  "step=-1"),
    ("misbehaving:bytes_state", "observe() returned a state_text of type bytes"),
    ("misbehaving:text_feature", "misbehaving:text_feature: episode 'arith_chain-train-0-0' observe() returned the "
                                 "feature 'multiply': 'high' (str)"),
    ("misbehaving:nan_horizon", "misbehaving:nan_horizon: episode 'arith_chain-train-0-0' has horizon=nan"),
    ("misbehaving:zero_horizon", "misbehaving:zero_horizon: episode 'arith_chain-train-0-0' has horizon=0"),
])
def test_an_episodes_id_step_state_or_horizon_of_the_wrong_kind_is_the_plug_ins(plugins, tmp_path, capsys, env,
                                                                                 named):
    """Refused naming the plug-in and the field before a row is built (an int id was an internal error in the row
    builder, a negative step blamed on the shard, a NaN horizon a bare 'cannot convert float NaN to integer')."""
    out = tmp_path / "out"
    assert run_collect(out, env) == 2
    line = one_error_line(capsys)
    assert named in line and "internal error" not in line
    assert not list(out.glob("*.parquet"))


def test_a_call_past_the_time_limit_stops_the_run_naming_it(plugins, tmp_path, capsys):
    started = time.monotonic()
    assert run_collect(tmp_path / "out", ENV, "misbehaving:sleepy", "--plugin-timeout-s", "0.5") == 2
    assert time.monotonic() - started < 20  # not the agent's 60 s
    line = one_error_line(capsys)
    assert "misbehaving:sleepy: act() on " in line and "did not return within 0.5 s (--plugin-timeout-s)" in line


def test_an_episode_that_never_ends_stops_at_the_cap(plugins, tmp_path, capsys):
    assert run_collect(tmp_path / "a", "misbehaving:endless") == 2
    line = one_error_line(capsys)
    assert "misbehaving:endless: episode 'arith_chain-train-0-" in line and "(its horizon, " in line
    assert "--plugin-max-steps" in line
    assert run_collect(tmp_path / "b", "misbehaving:endless", AGENT, "--plugin-max-steps", "7") == 2
    assert "is not done after 7 decisions (--plugin-max-steps, 7)" in one_error_line(capsys)


def test_ids_that_collide_across_batches_are_refused_when_first_seen(plugins, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_collect(out, "misbehaving:ids_by_count") == 2
    line = one_error_line(capsys)
    assert "misbehaving:ids_by_count: episode 2 has the id 'chain-1' that episode 0 had in an earlier batch" in line
    assert not list(out.glob("*.parquet"))  # nothing written, nothing marked complete


def test_ids_that_collide_with_a_shard_written_before_a_rerun_are_refused(plugins, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--env", "misbehaving:ids_by_count", "--agent", AGENT, "--episodes", "4", "--shard-size", "2",
            "--batch-size", "2", "--out", str(out)]
    assert collect(args) == 2  # the second shard's batch collides with the first's in this process
    assert "episode 2 has the id 'chain-1' that episode 0 had" in one_error_line(capsys)
    assert sorted(p.name for p in out.glob("*.parquet")) == ["shard-00000.parquet"]
    assert collect(args) == 2  # a new process: the shard on disk is what it collides with
    line = one_error_line(capsys)
    assert "shard-00001.parquet would hold episode 'chain-1', which shard-00000.parquet already holds" in line
    assert sorted(p.name for p in out.glob("*.parquet")) == ["shard-00000.parquet"]
    assert not json.loads((out / "manifest.json").read_text())["complete"]


def test_the_users_ctrl_c_still_stops_the_run(tmp_path):
    (tmp_path / "misbehaving.py").write_text(PLUGINS)
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "helper.data.collect", "--env", "misbehaving:presses_ctrl_c",
                           "--agent", AGENT, "--episodes", "2", "--out", str(tmp_path / "out")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False,
                          # as a shell starts it: a test runner's worker may ignore SIGINT, which a child inherits
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = [line for line in done.stderr.splitlines() if line.strip() and "%|" not in line]
    assert done.returncode == 130 and len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("collect-offline-trajectories: interrupted (Ctrl-C)")


def test_an_error_in_trajectories_code_is_the_projects():
    from helper.config_cli import origin
    from trajectories.schema import SchemaError

    try:
        from trajectories import rows

        rows.frame_of([object()], ())  # not a StepRecord: fails inside trajectories/
    except Exception as error:  # noqa: BLE001 - whichever error it is, where it is named matters
        assert not isinstance(error, SchemaError)
        where, ours = origin(error)
    assert ours and where.startswith("trajectories/") and "plug-in" not in where


def test_help_into_a_closed_pipe_prints_no_traceback():
    """``collect-offline-trajectories --help | head -1``: the reader goes away before the help is written (here
    before the first byte, so that every run meets it, not only where head wins the race)."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "helper.data.collect", "--help"], cwd=REPO, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
    assert done.returncode == 141
