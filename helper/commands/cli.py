"""The ``helpgate`` command: one subcommand per stage of the data flow.

    helpgate pipeline --out runs/demo          # everything, embedded defaults
    helpgate collect --out runs/demo/trajectories
    helpgate prm train --data runs/demo/trajectories --out runs/demo/prm
    helpgate prm score --data runs/demo/trajectories --model runs/demo/prm
    helpgate solve --data runs/demo/trajectories --budgets 1 2 3 --out runs/demo/solve
    helpgate distill --labels runs/demo/solve --out runs/demo/helper
    helpgate calibrate --helper runs/demo/helper --eps 0.1 --delta 0.1 --episodes 300
    helpgate sweep --helper runs/demo/helper --out runs/demo/sweep
    helpgate agile sft|ppo|eval ...

Each subcommand's options are generated from its config dataclass by ``tyro`` (the field
docstrings are the help; ``helper.config_cli``). Only the chosen command's module is imported, so
``helpgate --help`` stays fast. A user error prints one line and exits 2; ``--debug`` (anywhere on
the line) shows the traceback. A new command is one line in ``COMMANDS``. An option that serves a
measurement or an ablation (``helper.experiment_options``) is no flag here and is refused in one line;
``benchmarks/experiment.py`` runs the same commands with it (``main(argv, experiments=True)``). A command
that finishes records itself (command line, commit, machine, times) in the folder it wrote
(``helper.provenance``): ``--out``, or the field ``RECORDED_IN`` names.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import time
from pathlib import Path

from helper.config_cli import parse_config, quiet_pipe, run_reporting_errors, split_debug
from helper.experiment_options import EXPERIMENT_ENTRY, experiment_flag
from helper.provenance import write_stage
from helper.stored_config import renamed_flag

# (command path) -> (module, config class, run function, one-line help)
COMMANDS: dict[tuple[str, ...], tuple[str, str, str, str]] = {
    ("pipeline",): ("helper.commands.pipeline", "PipelineConfig", "run", "Run every stage end to end."),
    ("collect",): ("helper.data.collect", "CollectConfig", "run", "Collect offline trajectories."),
    ("prm", "train"): ("prm.training.train", "TrainConfig", "run_train", "Train the process reward model."),
    ("prm", "score"): ("prm.scoring.score", "ScoreConfig", "run_score", "Score trajectories with a PRM."),
    ("solve",): ("helper.solve.solve_command", "SolveConfig", "run", "Solve the budgeted MDP."),
    ("prm", "export"): ("prm.data.export", "ExportConfig", "run_export", "Export a PRM dataset (TRL stepwise layout)."),
    ("distill",): ("helper.solve.distill", "DistillConfig", "run", "Distill the helper classifier."),
    ("calibrate",): ("helper.commands.calibrate", "CalibrateConfig", "run",
                     "Certify a target success: the cheapest budget that reaches it, on held-out episodes."),
    ("evaluate",): ("helper.evaluation.play", "EvaluateConfig", "run", "Evaluate one helper online."),
    ("sweep",): ("helper.evaluation.sweep", "SweepConfig", "run", "Budget sweep against every baseline."),
    ("report",): ("helper.evaluation.report", "ReportConfig", "run", "Headline table of finished runs (win / tie / loss)."),
    ("serve",): ("helper.serve.chat_server", "ServeConfig", "run", "Serve a model behind OpenAI-compatible chat completions."),
    ("serve-gate",): ("helper.serve.gate_server", "ServeGateConfig", "run", "Serve a helper gate over HTTP."),
    ("agile", "sft"): ("agile.train.command", "SFTConfig", "run_sft", "Imitation-train the agent."),
    ("agile", "ppo"): ("agile.train.command", "PPOConfig", "run_ppo", "Session-level PPO."),
    ("agile", "eval"): ("helper.evaluation.agile_advice", "AgileEvalConfig", "run",
                        "Evaluate an AGILE agent (advice by its policy, a built-in gate or a helper)."),
}

RECORDED_IN: dict[tuple[str, ...], tuple[str, ...]] = {("prm", "score"): ("out", "data"), ("calibrate",): ("helper",),
                                                       ("serve",): (),
                                                       ("serve-gate",): (), ("report",): ()}
"""The config fields naming the folder a command's provenance goes to, the first one set wins, where
not ``out`` (none: servers run until stopped, and a report writes no run folder). Every field named must exist on
the command's config (``tests/helper/commands/test_outputs.py``): a missing one records nothing, silently."""


def _usage() -> str:
    width = max(len(" ".join(path)) for path in COMMANDS) + 2
    lines = ["usage: helpgate [--debug] COMMAND [OPTIONS]   (helpgate COMMAND --help lists its options)",
             "", __doc__.split("\n\n")[0].replace("``", ""), "", "commands:"]
    lines += [f"  {' '.join(path):<{width}}{summary}" for path, (*_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def _command_path(argv: list[str]) -> tuple[tuple[str, ...] | None, list[str]]:
    """The longest command of ``COMMANDS`` that ``argv`` starts with, and the arguments after it."""
    for path in sorted(COMMANDS, key=len, reverse=True):
        if tuple(argv[:len(path)]) == path:
            return path, argv[len(path):]
    return None, argv


def gives_experiment_option(argv: list[str]) -> bool:
    """Whether ``argv`` (a command and its options) gives an experiment option, so runs only on the experiment
    entry's line (``main(argv, experiments=True)``): for scripts that run commands either way."""
    path, rest = _command_path(argv)
    if path is None:
        return False
    module_name, config_name, *_ = COMMANDS[path]
    config = getattr(importlib.import_module(module_name), config_name)
    return experiment_flag(rest, config, " ".join(path)) is not None


def main(argv: list[str] | None = None, experiments: bool = False) -> int:
    """Run ``helpgate ARGV``; ``experiments``: with every config field a flag, the experiment options too
    (``benchmarks/experiment.py``; ``helper.experiment_options``)."""
    return quiet_pipe(lambda: _main(argv, experiments))


def _main(argv: list[str] | None = None, experiments: bool = False) -> int:
    argv, debug = split_debug(list(sys.argv[1:] if argv is None else argv))
    path, rest = _command_path(argv)
    if path is None:
        words = tuple(itertools.takewhile(lambda a: not a.startswith("-"), argv))
        if words and not any(p[:len(words)] == words for p in COMMANDS):
            names = ", ".join(" ".join(p) for p in COMMANDS)
            print(f"helpgate: error: unknown command {' '.join(words)!r}; the commands are: {names}.",
                  file=sys.stderr)
            return 2
        print(_usage())
        return 0 if "-h" in argv or "--help" in argv else 2
    module_name, config_name, run_name, _ = COMMANDS[path]
    prog = (EXPERIMENT_ENTRY if experiments else "helpgate") + " " + " ".join(path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if debug:
            raise
        print(f"{prog}: error: unavailable here: {error}", file=sys.stderr)
        return 2
    cls = getattr(module, config_name)
    # A flag of an older release, or an experiment's on the product's line: one line naming where it went.
    refused = renamed_flag(rest, config_name) or (None if experiments else experiment_flag(rest, cls, " ".join(path)))
    if refused:
        print(f"{prog}: error: {refused}", file=sys.stderr)
        return 2
    config = parse_config(cls, rest, prog=prog, experiments=experiments)
    folder = next(filter(None, (getattr(config, name, None) for name in RECORDED_IN.get(path, ("out",)))), None)
    started, clock = time.time(), time.perf_counter()
    code, _ = run_reporting_errors(prog, getattr(module, run_name), config, debug)
    if code == 0 and folder and Path(folder).is_dir():
        write_stage(folder, " ".join(path), started, time.perf_counter() - clock, [*prog.split()[:-len(path)], *argv])
    return code


if __name__ == "__main__":
    sys.exit(main())
