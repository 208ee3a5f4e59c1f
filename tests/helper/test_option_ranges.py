"""Every numeric option of every command is in the one table of ranges (helper.option_ranges), and the CLI
refuses a value outside it, or one that is not a number, in one line with exit code 2 before any work;
``--help`` into a closed pipe ends quietly."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest

from helper.commands.cli import COMMANDS, gives_experiment_option, main
from helper.experiment_options import EXPERIMENT_ENTRY
from helper.option_ranges import RANGES, Range

ROOT = Path(__file__).resolve().parents[2]


def numeric_fields(cls: type) -> list[str]:
    """Names of the int / float fields (lists and optionals of them too) of ``cls`` and its nested configs."""
    names = []
    for item in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[item.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            names += numeric_fields(hint)
            continue
        parts = {hint, *typing.get_args(hint)} | {a for h in typing.get_args(hint) for a in typing.get_args(h)}
        if {int, float} & parts and bool not in parts:
            names.append(item.name)
    return names


def test_every_numeric_option_of_every_command_has_a_range():
    missing = {}
    for path, (module, config, *_) in COMMANDS.items():
        cls = getattr(importlib.import_module(module), config)
        lacking = [name for name in numeric_fields(cls) if name not in RANGES]
        if lacking:
            missing[" ".join(path)] = lacking
    assert not missing, missing
    # ... and every default lies in its range (a default the table refused would refuse every run).
    for path, (module, config, *_) in COMMANDS.items():
        cls = getattr(importlib.import_module(module), config)
        if all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
               for f in dataclasses.fields(cls)):
            from helper.option_ranges import check

            check(cls())


def test_ranges_include_and_exclude_their_bounds():
    assert Range(1).holds(1) and not Range(1).holds(0)
    assert not Range(0, above=True).holds(0) and Range(0, above=True).holds(1e-9)
    assert Range(0, 1, below=True).holds(0) and not Range(0, 1, below=True).holds(1)
    assert Range(1, 1_000_000).text() == "in [1, 1,000,000]" and Range(0, 1, below=True).text() == ">= 0 and < 1"


def is_experiment(argv: list[str]) -> bool:
    """Whether ``argv`` gives an experiment option: its range is checked on the experiment entry's line, where it
    is a flag (the product's line refuses it before any range)."""
    return gives_experiment_option(argv)


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("argv, named", [
    (["prm", "score", "--batch-tokens", "0"], "batch_tokens=0"),
    (["prm", "score", "--batch-tokens", "-1"], "batch_tokens=-1"),
    (["prm", "score", "--max-length", "0"], "max_length=0"),
    (["prm", "score", "--max-length", "-5"], "max_length=-5"),
    (["prm", "train", "--batch-tokens", "0"], "batch_tokens=0"),
    (["prm", "train", "--max-episodes", "0"], "max_episodes=0"),
    (["prm", "train", "--max-length", "0"], "max_length=0"),
    (["prm", "train", "--l2", "-1"], "l2=-1"),
    (["pipeline", "--bins", "0"], "bins=0"),
    (["pipeline", "--eval-episodes", "0"], "eval_episodes=0"),
    (["pipeline", "--episodes", "0"], "episodes=0"),
    (["sweep", "--episodes", "0"], "episodes=0"),
    (["sweep", "--episodes", "1000000000"], "episodes=1000000000"),
    (["serve-gate", "--helper", "x", "--port", "70000"], "port=70000"),
    (["agile", "ppo", "--gamma", "1.5"], "gamma=1.5"),
])
def test_out_of_range_is_one_line_before_any_work(argv, named, tmp_path, capsys):
    out = tmp_path / "out"
    started = time.perf_counter()
    experiments = is_experiment(argv)
    assert main([*argv, *(["--out", str(out)] if argv[0] in ("pipeline", "sweep", "prm") else [])],
                experiments=experiments) == 2
    assert time.perf_counter() - started < 5  # no collection, no model: refused at once
    line = one_line(capsys)
    prog = EXPERIMENT_ENTRY if experiments else "helpgate"
    assert line.startswith(f"{prog} {argv[0]}") and ": error: " in line and named in line
    assert not out.exists()  # nothing written


@pytest.mark.parametrize("argv, shown", [
    (["solve", "--bins", "abc"], "--bins abc: not a whole number"),
    (["solve", "--smoothing", "lots"], "--smoothing lots: not a number"),
    (["sweep", "--budgets", "1", "x"], "--budgets 1 x: not of the option's type"),
    (["solve", "--bogus", "1"], "Unrecognized options: --bogus"),
])
def test_a_value_that_is_not_a_number_is_one_line(argv, shown, capsys):
    experiments = is_experiment(argv)
    with pytest.raises(SystemExit) as stop:
        main(argv, experiments=experiments)
    assert stop.value.code == 2
    line = one_line(capsys)
    assert line.startswith(EXPERIMENT_ENTRY if experiments else "helpgate ") and shown in line and "╭" not in line


def test_help_into_a_closed_pipe_exits_quietly():
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    # `| true`: the reader exits before reading anything, so every write meets a closed pipe.
    done = subprocess.run(f"{sys.executable} -m helper.commands.cli prm train --help | true; "
                          "echo ${PIPESTATUS[0]} >&2", shell=True, executable="/bin/bash", cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.stderr.strip() in ("0", "141")  # 141 where the pipe closed first (128 + SIGPIPE)
