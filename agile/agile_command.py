"""``helpgate agile sft|ppo|eval``: the three commands' configs and run functions, in one place.

Each command is a dataclass config (every field with a one-line docstring, so a CLI can be
generated from it) and a run function:

- ``SFTConfig`` / ``run_sft(cfg)``: imitation data from the gold annotations, fine-tune on the
  action tokens, write ``out_dir/model`` (``agile.sft``);
- ``PPOConfig`` / ``run_ppo(cfg)``: session-level PPO from that model (``agile.ppo``);
- ``EvalConfig`` / ``run_eval(cfg, gate=None)``: accuracy / advice rate / total score per group,
  the policy's own advice beside a gate's (``agile.agile_eval``).

SFT and PPO run data-parallel under ``accelerate launch``. This module is also a minimal entry
point for that, taking ``field=value`` overrides (lists as JSON). On CPU, several processes are
started by accelerate's multi-process launcher with no GPU visible (they join a gloo group);
``accelerate launch --cpu`` alone starts a single process::

    CUDA_VISIBLE_DEVICES= accelerate launch --multi_gpu --num_processes 2 -m agile.agile_command ppo model=tiny iterations=1
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing

from agile.agile_eval import EvalConfig, run_eval
from agile.ppo import PPOConfig
from agile.ppo import train as _train_ppo
from agile.sft import SFTConfig, run_sft

COMMANDS = {"sft": SFTConfig, "ppo": PPOConfig, "eval": EvalConfig}

__all__ = ["SFTConfig", "PPOConfig", "EvalConfig", "run_sft", "run_ppo", "run_eval", "COMMANDS",
           "parse_overrides", "main"]


def run_ppo(cfg: PPOConfig) -> dict:
    """Session-level PPO (AGILE Algorithm 1); returns the per-iteration history and the model."""
    return _train_ppo(cfg)


def parse_overrides(cls: type, items: list[str]):
    """Build ``cls`` from ``field=value`` strings, converting each value to the field's type."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.lstrip("-").replace("-", "_")
        if not sep or key not in names:
            raise SystemExit(f"{item!r}: expected field=value with a field of {cls.__name__} "
                             f"({', '.join(sorted(names))}).")
        kind = hints[key]
        origin = typing.get_origin(kind)
        if kind is bool:
            values[key] = raw.lower() in ("1", "true", "yes", "on")
        elif kind in (int, float):
            values[key] = kind(raw)
        elif origin is list:
            values[key] = json.loads(raw) if raw.startswith("[") else [v for v in raw.split(",") if v]
        else:
            values[key] = raw
    return cls(**values)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m agile.agile_command {{{'|'.join(COMMANDS)}}} [field=value ...]")
        return 2
    command, cfg = argv[0], parse_overrides(COMMANDS[argv[0]], argv[1:])
    if command == "sft":
        result = run_sft(cfg)
        result.pop("model", None)
    elif command == "ppo":
        result = run_ppo(cfg)
        result = {"history": result["history"], "model_dir": result.get("model_dir")}
    else:
        result = {"rows": run_eval(cfg)}
    print(json.dumps(result, default=str)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
