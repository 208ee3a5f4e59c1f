"""The ``helpgate`` command: one subcommand per stage of the data flow.

    helpgate pipeline --out runs/demo          # everything, embedded defaults
    helpgate collect --out runs/demo/trajectories
    helpgate prm train --data runs/demo/trajectories --out runs/demo/prm
    helpgate prm score --data runs/demo/trajectories --model runs/demo/prm
    helpgate solve --data runs/demo/trajectories --budget 1 2 3 --out runs/demo/solve
    helpgate distill --labels runs/demo/solve --out runs/demo/helper
    helpgate sweep --helper runs/demo/helper --out runs/demo/sweep
    helpgate agile sft|ppo|eval ...

Each subcommand's options are generated from its config dataclass (``helper.config_cli``);
modules are imported only when their command runs, so ``helpgate --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from helper.config_cli import add_dataclass_options, config_from_args

# (command path) -> (module, config class, run function, one-line help)
COMMANDS: dict[tuple[str, ...], tuple[str, str, str, str]] = {
    ("pipeline",): ("helper.pipeline", "PipelineConfig", "run", "Run every stage end to end."),
    ("collect",): ("helper.collect", "CollectConfig", "run", "Collect offline trajectories."),
    ("prm", "train"): ("prm.train", "TrainConfig", "run_train", "Train the process reward model."),
    ("prm", "score"): ("prm.score", "ScoreConfig", "run_score", "Score trajectories with a PRM."),
    ("solve",): ("tabular_rl.solve_command", "SolveConfig", "run", "Solve the budgeted MDP."),
    ("distill",): ("helper.distill", "DistillConfig", "run", "Distill the helper classifier."),
    ("evaluate",): ("helper.evaluate", "EvaluateConfig", "run", "Evaluate one helper online."),
    ("sweep",): ("helper.sweep", "SweepConfig", "run", "Budget sweep against every baseline."),
    ("serve",): ("helper.serve_model", "ServeConfig", "run", "Serve a model behind OpenAI-compatible chat completions."),
    ("serve-gate",): ("helper.serve_gate", "ServeGateConfig", "run", "Serve a helper gate over HTTP."),
    ("agile", "sft"): ("agile.agile_command", "SFTConfig", "run_sft", "Imitation-train the agent."),
    ("agile", "ppo"): ("agile.agile_command", "PPOConfig", "run_ppo", "Session-level PPO."),
    ("agile", "eval"): ("helper.agile_advice", "AgileEvalConfig", "run",
                        "Evaluate an AGILE agent (advice by its policy, a built-in gate or a helper)."),
}


def _build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(prog="helpgate", description=__doc__.split("\n\n")[0])
    groups: dict[tuple[str, ...], argparse._SubParsersAction] = {
        (): parser.add_subparsers(dest="command", metavar="COMMAND")
    }
    chosen = tuple(a for a in argv if not a.startswith("-"))
    targets: dict = {}
    for path, (module, config_name, run_name, summary) in COMMANDS.items():
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix not in groups:
                sub = groups[prefix[:-1]].add_parser(prefix[-1], help=f"{prefix[-1]} commands")
                groups[prefix] = sub.add_subparsers(dest="command_" + "_".join(prefix))
        sub = groups[path[:-1]].add_parser(path[-1], help=summary, description=summary)
        sub.set_defaults(_command=path)
        targets[path] = (module, config_name, run_name)
        # Only the command being run imports its module to add its options.
        if chosen[: len(path)] == path:
            try:
                config_cls = getattr(importlib.import_module(module), config_name)
            except (ImportError, AttributeError) as error:
                parser.error(f"'helpgate {' '.join(path)}' is unavailable here: {error}")
            add_dataclass_options(sub, config_cls)
    return parser, targets


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, targets = _build_parser(argv)
    namespace = parser.parse_args(argv)
    path = getattr(namespace, "_command", None)
    if path is None:
        parser.print_help()
        return 2
    module_name, config_name, run_name = targets[path]
    module = importlib.import_module(module_name)
    config = config_from_args(getattr(module, config_name), namespace)
    getattr(module, run_name)(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
