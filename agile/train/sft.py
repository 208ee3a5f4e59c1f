"""Imitation learning (SFT) of the AGILE agent: cross-entropy on the action tokens only.

Run (one process, or several with ``accelerate launch``)::

    helpgate agile sft --model smollm2 --questions-per-group 40 --out runs/agile_sft
    CUDA_VISIBLE_DEVICES= accelerate launch --multi_gpu --num_processes 2 -m agile.train.command sft --model smollm2

The data is ``agile.train.sft_data``'s gold sessions in the agent's own format. The loss is the mean
negative log-likelihood of the tokens the LLM writes (function names, SQL, answers, reflections);
the question, the memory and tool output are context only.

Why a small loop of our own and not TRL's ``SFTTrainer``: TRL is not a dependency, its trainer
pulls in datasets/Trainer machinery for what is here a forty-line loop, and masking every
non-action token is one multiplication with our action mask (``ActionLM`` scores only action
positions), where a trainer would need a custom collator. ``accelerate`` gives the same
multi-process data parallelism either way.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

import torch
import tyro

from agile.executor.policy import ActionLM, pad_batch
from agile.train.data_parallel import equal_share, fewest


@dataclass
class SFTConfig:
    """``helpgate agile sft``: build gold sessions, fine-tune on their action tokens, save."""

    model: str = "smollm2"
    """Model to fine-tune: smollm2 (embedded), tiny (tests), a folder or a Hugging Face id."""
    data_root: Annotated[str, tyro.conf.arg(name="data")] = ""
    """ProductQA root holding train/ and test/; empty uses ../shared/productqa or $HELPGATE_PRODUCTQA."""
    groups: list[str] = field(default_factory=list)
    """Train groups to use; empty uses every group of the train split."""
    questions_per_group: int = 40
    """Questions (sessions) taken from the start of each group's episode."""
    advice_share: float = 0.5
    """Probability that a session whose answer memory lacks is shown seeking advice."""
    advice_cost: float = 0.3
    """Advice cost c shown in the prompt."""
    data_file: str = ""
    """Read samples from this JSONL (written by a previous run) instead of building them."""
    epochs: float = 1.0
    """Passes over the samples (fractions allowed)."""
    max_steps: int = -1
    """Stop after this many optimizer steps; -1 runs all epochs."""
    batch_size: int = 4
    """Sessions per optimizer step on each process."""
    micro_batch_size: int = 2
    """Sessions per forward pass (gradients are accumulated up to batch_size)."""
    lr: float = 2e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    lora_r: int = 16
    """LoRA rank; 0 fine-tunes every weight instead."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA branch."""
    seed: int = 0
    """Seed for data order, advice sampling and initialisation."""
    device: str | None = None
    """Torch device (default: cuda when available, else cpu)."""
    cpu_threads: int = 0
    """torch CPU threads; 0 keeps torch's default (1 is fastest on a busy shared machine)."""
    out: str = "runs/agile_sft"
    """Where the merged model (model/), the samples and the log go."""
    log_every: int = 10
    """Print the loss every this many steps."""
    save: bool = True
    """Write the fine-tuned model to out/model."""


def action_nll(model: ActionLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean negative log-likelihood over the action tokens of a padded batch."""
    out = model(batch["input_ids"], batch["attention_mask"], batch["action_mask"])
    mask = batch["action_mask"].to(out["logp"].dtype)
    return -(out["logp"] * mask).sum() / mask.sum().clamp(min=1.0)


def add_lora(lm, r: int, alpha: int, dropout: float, last_layers: int = 0):
    """Wrap ``lm`` with LoRA adapters on every linear layer (``r == 0``: return it unchanged), or on
    those of its ``last_layers`` decoder layers only."""
    if r <= 0:
        return lm
    from peft import LoraConfig, get_peft_model

    layers, targets = None, "all-linear"
    if last_layers > 0:
        n = lm.config.num_hidden_layers
        layers = list(range(max(n - last_layers, 0), n))
        # peft takes a layer subset only with the modules named: every linear module inside the layers.
        targets = sorted({name.rsplit(".", 1)[-1] for name, module in lm.named_modules()
                          if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"})
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                        task_type="CAUSAL_LM", layers_to_transform=layers)
    return get_peft_model(lm, config)


def train_sft(model: ActionLM, samples: list[tuple[list[int], list[int]]], cfg: SFTConfig,
              pad_id: int, accelerator=None, log=print) -> list[float]:
    """Fine-tune ``model`` on ``samples`` (this process's share); returns the loss of each step.

    Every process takes the same number of steps (the fewest any of them would take), so the
    gradient all-reduce never waits for a process that has stopped."""
    from accelerate import Accelerator

    accelerator = accelerator or Accelerator(cpu=cfg.device == "cpu")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    rng = random.Random(cfg.seed)
    steps_per_epoch = max(len(samples) // cfg.batch_size, 1)
    total = math.ceil(cfg.epochs * steps_per_epoch)
    if cfg.max_steps >= 0:
        total = min(total, cfg.max_steps)
    total = fewest(total, accelerator)
    order: list[int] = []
    losses = []
    start = time.perf_counter()
    for step in range(total):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(samples)))
            rng.shuffle(fresh)
            order += fresh
        batch_ids, order = order[:cfg.batch_size], order[cfg.batch_size:]
        micro = [batch_ids[i:i + cfg.micro_batch_size]
                 for i in range(0, len(batch_ids), cfg.micro_batch_size)]
        n_tokens = sum(sum(samples[i][1]) for i in batch_ids)
        step_loss = 0.0
        for k, chunk in enumerate(micro):
            batch = {key: t.to(accelerator.device)
                     for key, t in pad_batch([samples[i] for i in chunk], pad_id).items()}
            # Weight each micro-batch by its share of action tokens, so the step's loss is the
            # token mean over the whole batch whatever the split.
            weight = batch["action_mask"].sum().item() / max(n_tokens, 1)
            context = accelerator.no_sync(model) if k < len(micro) - 1 else _null()
            with context:
                loss = action_nll(model, batch) * weight
                accelerator.backward(loss)
            step_loss += loss.item()
        accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(step_loss)
        if accelerator.is_main_process and (step % cfg.log_every == 0 or step == total - 1):
            log(f"sft step {step + 1}/{total} loss {step_loss:.4f} "
                f"({time.perf_counter() - start:.0f}s)")
    model.eval()
    return losses


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def save_model(model: ActionLM, tokenizer, folder: str | Path) -> Path:
    """Write ``model`` with its LoRA weights merged (the model itself is left as it is) to a folder
    that ``load_causal_lm`` reads."""
    folder = Path(folder)
    lm = model.lm
    if hasattr(lm, "merge_and_unload"):
        lm = copy.deepcopy(lm).merge_and_unload()  # a copy: the caller's model keeps its adapters
    folder.mkdir(parents=True, exist_ok=True)
    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_sft(cfg: SFTConfig) -> dict:
    """Build (or read) the imitation data, fine-tune, save; returns a summary dict."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from agile.envs.productqa import default_productqa_root, load_split
    from agile.executor.executor import ExecutorConfig
    from agile.executor.memory import Embedder
    from agile.models import load_causal_lm
    from agile.train.sft_data import build_sft_records, load_samples, save_records

    accelerator = Accelerator(cpu=cfg.device == "cpu")
    set_seed(cfg.seed)
    if cfg.cpu_threads > 0:
        torch.set_num_threads(cfg.cpu_threads)
    out = Path(cfg.out)
    lm, tokenizer = load_causal_lm(cfg.model, device=str(accelerator.device), seed=cfg.seed)
    if cfg.data_file:
        samples = load_samples(cfg.data_file)
    else:
        root = cfg.data_root or default_productqa_root()
        groups = [g for g in load_split(root, "train") if not cfg.groups or g.name in cfg.groups]
        if not groups:
            raise ValueError(f"no train group of {root} matches groups={cfg.groups}; "
                             "leave groups empty or name folders of the train split.")
        records = build_sft_records(groups, tokenizer, Embedder(), cfg.questions_per_group,
                                    ExecutorConfig(advice_cost=cfg.advice_cost),
                                    cfg.advice_share, cfg.seed)
        samples = [(r.input_ids, r.action_mask) for r in records]
        if accelerator.is_main_process:
            save_records(records, out / "sft_data.jsonl")
    # Each process trains on its own share, all shares the same size (the uneven tail is dropped);
    # the averaged gradients make one data-parallel step.
    shard, dropped = equal_share(samples, accelerator)
    if dropped and accelerator.is_main_process:
        print(f"sft: {len(samples)} samples over {accelerator.num_processes} processes: "
              f"the last {dropped} are left out so that every process takes the same steps.")
    model = ActionLM(add_lora(lm, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout))
    start = time.perf_counter()
    losses = train_sft(model, shard, cfg, tokenizer.pad_token_id, accelerator)
    seconds = time.perf_counter() - start
    model = accelerator.unwrap_model(model)
    summary = {"samples": len(samples), "dropped_samples": dropped, "steps": len(losses), "first_loss": losses[0] if losses else None,
               "last_loss": losses[-1] if losses else None, "seconds": seconds,
               "processes": accelerator.num_processes, "config": asdict(cfg)}
    if accelerator.is_main_process:
        if cfg.save:
            summary["model_dir"] = str(save_model(model, tokenizer, out / "model"))
        out.mkdir(parents=True, exist_ok=True)
        (out / "sft_summary.json").write_text(json.dumps({**summary, "losses": losses}, indent=1))
    accelerator.wait_for_everyone()
    summary["model"] = model
    return summary
