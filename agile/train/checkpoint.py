"""PPO's per-iteration checkpoint: a stopped run goes on where it was, with the same draws.

One file per process (``checkpoint-p{index}.pt``: each process has its own random streams), written
to a temporary name and renamed, so a kill mid-write leaves the previous iteration's file whole.
"""

from __future__ import annotations

import os
import random
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch

RESUMABLE = ("iterations", "out_dir", "save", "stop_when_flat", "flat_tolerance", "cpu_threads", "device")
"""Settings a resumed run may change: when to stop, where to write and how fast to run."""


def checkpoint_path(out: Path, process: int) -> Path:
    return Path(out) / f"checkpoint-p{process}.pt"


def _trainable(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(out: Path, cfg, model, optimizer, rng: random.Random, policy, accelerator, state: dict) -> None:
    """Write this process's checkpoint after an iteration (``state``: history, rollout log, human calls)."""
    path = checkpoint_path(out, accelerator.process_index)
    path.parent.mkdir(parents=True, exist_ok=True)
    decoder = getattr(policy, "constrained", None)
    payload = {"config": asdict(cfg), "weights": _trainable(model), "optimizer": optimizer.state_dict(),
               "rng": rng.getstate(), "torch_rng": torch.get_rng_state(),
               "function_rng": decoder.function_rng.bit_generator.state if decoder is not None else None,
               "policy_counters": (policy.generated_tokens, policy.prompt_tokens, policy.seconds), **state}
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(out: Path, cfg, model, optimizer, rng: random.Random, policy, process: int) -> dict:
    """Restore this process's checkpoint into the model, optimizer and streams; the saved state, or
    an empty one when there is none. A checkpoint of a different run is refused in one line."""
    path = checkpoint_path(out, process)
    if not path.is_file():
        return {"history": [], "rollout_log": [], "human_calls": 0}
    try:
        saved = torch.load(path, weights_only=False)
        saved["config"], saved["weights"]  # a file without them is no checkpoint either
    except Exception as exc:  # torch.load raises whatever its unpickler meets in a damaged file
        raise ValueError(f"{path}: not a readable PPO checkpoint ({type(exc).__name__}: {exc}); delete it to "
                         "start over, or pass another out_dir.") from exc
    now = asdict(cfg)
    # A setting added after the checkpoint was written ran at its default.
    defaults = {f.name: f.default for f in fields(cfg) if f.default is not MISSING}
    differs = sorted(k for k in now if k not in RESUMABLE and saved["config"].get(k, defaults.get(k)) != now[k])
    if differs:
        raise ValueError(f"{path}: a checkpoint of a run with other settings (differs: {', '.join(differs)}); "
                         "pass another out_dir, or delete the checkpoint to start over.")
    params = dict(model.named_parameters())
    missing = sorted(set(saved["weights"]) - set(params))
    if missing:
        raise ValueError(f"{path}: weights {missing[:3]} are not in this model; delete the checkpoint to start over.")
    with torch.no_grad():
        for name, value in saved["weights"].items():
            params[name].copy_(value.to(params[name].device))
    optimizer.load_state_dict(saved["optimizer"])
    rng.setstate(saved["rng"])
    torch.set_rng_state(saved["torch_rng"])
    decoder = getattr(policy, "constrained", None)
    if decoder is not None and saved["function_rng"] is not None:
        decoder.function_rng.bit_generator.state = saved["function_rng"]
    policy.generated_tokens, policy.prompt_tokens, policy.seconds = saved["policy_counters"]
    return {k: saved[k] for k in ("history", "rollout_log", "human_calls")}
