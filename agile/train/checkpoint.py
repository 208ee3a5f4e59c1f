"""PPO's per-iteration checkpoint: a stopped run goes on where it was, with the same draws.

One pair of files per process (each process has its own random streams): ``checkpoint-p{index}.safetensors``
(the trainable weights, the optimizer's tensors, torch's generator state) and ``checkpoint-p{index}.json``
(the config, the other streams, the history). No pickle: a checkpoint is data, never code. Both are written
to temporary names and renamed, the JSON last, so a kill mid-write leaves the previous iteration's pair whole.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch

RESUMABLE = ("iterations", "out", "save", "stop_when_flat", "flat_tolerance", "cpu_threads", "device")
"""Settings a resumed run may change: when to stop, where to write and how fast to run."""


def checkpoint_path(out: Path, process: int) -> Path:
    """The JSON half of a process's checkpoint (its tensors sit beside it, ``.safetensors``)."""
    return Path(out) / f"checkpoint-p{process}.json"


def _tensor_path(path: Path) -> Path:
    return path.with_suffix(".safetensors")


def save_checkpoint(out: Path, cfg, model, optimizer, rng: random.Random, policy, accelerator, state: dict) -> None:
    """Write this process's checkpoint after an iteration (``state``: history, rollout log, human calls)."""
    from safetensors.torch import save_file

    path = checkpoint_path(out, accelerator.process_index)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"weight/{name}": p.detach().cpu().contiguous() for name, p in model.named_parameters()
               if p.requires_grad}
    # The choice head's standardiser is fitted once, from the first rollouts: state, not weights.
    tensors.update({f"buffer/{name}": b.detach().cpu().contiguous() for name, b in model.named_buffers()
                    if name.startswith("choice_head.")})
    opt = optimizer.state_dict()
    for index, entry in opt["state"].items():
        for key, value in entry.items():
            tensors[f"optimizer/{index}/{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    tensors["torch_rng"] = torch.get_rng_state()
    decoder = getattr(policy, "constrained", None)
    meta = {"config": asdict(cfg), "param_groups": opt["param_groups"], "rng": rng.getstate(),
            "function_rng": decoder.function_rng.bit_generator.state if decoder is not None else None,
            "policy_counters": [policy.generated_tokens, policy.prompt_tokens, policy.seconds], **state}
    save_file(tensors, _tensor_path(path).with_suffix(".tmp"))
    os.replace(_tensor_path(path).with_suffix(".tmp"), _tensor_path(path))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, default=str))
    os.replace(tmp, path)


def load_checkpoint(out: Path, cfg, model, optimizer, rng: random.Random, policy, process: int) -> dict:
    """Restore this process's checkpoint into the model, optimizer and streams; the saved state, or
    an empty one when there is none. A checkpoint of a different run, or a damaged one, is refused in one line."""
    from safetensors.torch import load_file

    path = checkpoint_path(out, process)
    if not path.is_file():
        return {"history": [], "rollout_log": [], "human_calls": 0}
    try:
        meta = json.loads(path.read_text())
        tensors = load_file(_tensor_path(path))
        meta["config"], meta["rng"]  # a file without them is no checkpoint either
    except Exception as exc:  # a damaged file fails in whatever reader meets it first
        raise ValueError(f"{path}: not a readable PPO checkpoint ({type(exc).__name__}: {exc}); delete it and "
                         f"{_tensor_path(path).name} to start over, or pass another --out.") from exc
    now = asdict(cfg)
    # A setting added after the checkpoint was written ran at its default.
    defaults = {f.name: f.default for f in fields(cfg) if f.default is not MISSING}
    saved_config = json.loads(json.dumps(meta["config"]))
    differs = sorted(k for k in now if k not in RESUMABLE
                     and saved_config.get(k, defaults.get(k)) != json.loads(json.dumps(now[k], default=str)))
    if differs:
        raise ValueError(f"{path}: a checkpoint of a run with other settings (differs: {', '.join(differs)}); "
                         "pass another --out, or delete the checkpoint to start over.")
    params = dict(model.named_parameters())
    weights = {k.removeprefix("weight/"): v for k, v in tensors.items() if k.startswith("weight/")}
    missing = sorted(set(weights) - set(params))
    if missing:
        raise ValueError(f"{path}: weights {missing[:3]} are not in this model; delete the checkpoint to start over.")
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].device))
        for key, value in tensors.items():
            if key.startswith("buffer/") and key.removeprefix("buffer/") in buffers:
                target = buffers[key.removeprefix("buffer/")]
                target.copy_(value.to(target.device))
    state: dict = {}
    for key, value in tensors.items():
        if key.startswith("optimizer/"):
            _, index, name = key.split("/", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    version, internal, gauss = meta["rng"]
    rng.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(tensors["torch_rng"])
    decoder = getattr(policy, "constrained", None)
    if decoder is not None and meta["function_rng"] is not None:
        decoder.function_rng.bit_generator.state = meta["function_rng"]
    policy.generated_tokens, policy.prompt_tokens, policy.seconds = meta["policy_counters"]
    return {k: meta[k] for k in ("history", "rollout_log", "human_calls")}
