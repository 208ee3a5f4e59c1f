"""Session-level PPO for the AGILE agent (AGILE, Algorithm 1), in one file that reads top to bottom.

Run (one process, or several with ``accelerate launch``)::

    helpgate agile ppo --model runs/agile_sft/model --iterations 4 --out runs/agile_ppo
    CUDA_VISIBLE_DEVICES= accelerate launch --multi_gpu --num_processes 2 -m agile.train.command ppo --model tiny --iterations 1

The LLM is the policy of a token-level MDP: every token it writes is an action, the executor's
tokens (question, memory, tool output, advice) are transitions of the environment. One iteration:

1. **Rollout.** Episodes are windows of ``questions_per_episode`` consecutive questions of a
   train group; the executor runs them with the current policy (sampling, batched across
   episodes). With ``rollouts_per_task = K > 1`` every session is rolled out K times from the
   same state (same memory, same context) and the episode continues from the first copy.
2. **Proxy reward.** Sessions are independent samples (AGILE's session-level optimisation), each
   rewarded ``r + A_i``: ``r = 1[correct] - c * 1[advised]`` and, for a session that sought
   advice, ``A_i = beta * 1[a later question of the episode is similar] / (n_i + 1)`` with n_i the
   memory entries already similar to the question: advice earns a bonus when memory will reuse
   it and did not hold it yet. (Similar: MiniLM cosine >= ``similarity_threshold``.)
3. **Advantages** (``estimator``): ``gae`` with a value head on the policy's last hidden state and
   the KL to the reference folded into per-token rewards (``-kl_coef * (log pi - log pi_ref)``,
   the session reward added on its last action token); ``loop`` (leave-one-out over the K
   rollouts of a session, no critic) or ``grpo`` (group-normalised), both with the KL as a loss
   term (the k3 estimator) instead; ``distinct`` (constrained decoding): the K copies draw distinct
   first functions and share the all-action gradient (``agile.train.choices.distinct_advantages``);
   ``natural``: the same draws, each function pushed by its advantage (the natural gradient in the choice's logits).
4. **Update.** ``update_epochs`` passes of minibatches: per-token clipped ratio
   ``max(-A r, -A clip(r, 1-eps, 1+eps))`` and a clipped value loss, averaged over the action
   tokens only. The policy is the model plus LoRA adapters (``peft``); the reference model is the
   same model with the adapters switched off, so it costs no extra memory.

With ``decoding="constrained"`` the policy is the constrained one (``agile.executor.constrained``): rollouts
sample each turn's function among the allowed ones and PPO trains that choice alone, its ratio and an exact
KL taken over the allowed set (``agile.train.choices``; advantages ``loop`` or ``grpo``). Every iteration
ends in a checkpoint (``agile.train.checkpoint``): a stopped run started again goes on from there.

Every ``[SeekAdvice]`` taken in a rollout (every copy of a session with K > 1) is a human call: a
person answers it. Their count, summed over processes, is each iteration's ``human_calls`` and the
run's ``training_human_calls`` in ``metrics.json``; ``rollouts.jsonl`` logs every rollout session.
"""

from __future__ import annotations

import copy
import json
import random
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import torch
import tyro

from agile.executor.executor import Executor, ExecutorConfig, SessionRecord, records_to_jsonl
from agile.executor.scores import summarize
from agile.executor.policy import ActionLM, LLMPolicy, pad_batch, run_executors
from agile.train.advantages import gae_segments, whiten
from agile.train.choices import DISTINCT_DRAWS, update_summary
from agile.train.data_parallel import fewest

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

@dataclass
class PPOConfig:
    """``helpgate agile ppo``: session-level PPO of the agent on the ProductQA train groups."""

    model: str = "smollm2"
    """Starting policy (usually the SFT output folder); also the frozen reference model."""
    data_root: Annotated[str, tyro.conf.arg(name="data")] = ""
    """ProductQA root holding train/ and test/; empty uses ../shared/productqa or $HELPGATE_PRODUCTQA."""
    groups: list[str] = field(default_factory=list)
    """Train groups to sample episodes from; empty uses every group of the train split."""
    questions_per_episode: int = 8
    """Sessions in one episode (a window of consecutive questions of one group)."""
    episodes_per_iteration: int = 4
    """Episodes rolled out per iteration on each process."""
    iterations: int = 4
    """Rollout-then-update iterations."""
    decoding: Literal["free", "constrained"] = "free"
    """free: rollouts sample turns token by token and PPO trains every action token; constrained: rollouts
    sample the function among the allowed ones and PPO trains that choice (``agile.train.choices``; needs
    estimator loop or grpo)."""
    estimator: Literal["gae", "loop", "grpo", "distinct", "natural"] = "gae"
    """Advantage estimator: gae (value head), loop (leave-one-out), grpo (group-normalised), distinct
    (constrained only: the K copies of a session draw distinct functions, all-action advantages;
    ``agile.train.choices.distinct_advantages``) or natural (the same draws, each function's copies pushed by
    its advantage Q(a) - mean Q: the natural gradient in the choice's logits, which does not fade as pi saturates)."""
    rollouts_per_task: int = 1
    """K rollouts of every session from the same state; loop and grpo need K >= 2."""
    advice_cost: float = 0.3
    """Advice cost c in the reward 1[correct] - c * 1[advised]."""
    proxy_beta: float = 0.1
    """beta of AGILE's proxy bonus for advice that later sessions can reuse; 0 turns it off."""
    similarity_threshold: float = 0.46
    """Cosine at which two questions count as similar (proxy bonus and memory counts)."""
    kl_coef: float = 0.05
    """Weight of the KL to the reference model (per-token reward for gae, loss term otherwise)."""
    clip_eps: float = 0.2
    """PPO ratio clip range."""
    value_clip_eps: float = 0.2
    """Clip range of the value update around the rollout's values."""
    vf_coef: float = 0.5
    """Weight of the value loss (gae only)."""
    gamma: float = 1.0
    """Discount between action tokens."""
    lam: float = 0.95
    """GAE lambda."""
    whiten_advantages: bool = True
    """Normalise gae advantages over the iteration's action tokens (loop/grpo are centred already)."""
    lr: float = 1e-4
    """AdamW learning rate (LoRA weights and value head)."""
    update_epochs: int = 2
    """Passes over the iteration's sessions."""
    minibatch_size: int = 4
    """Sessions per optimizer step on each process."""
    micro_batch_size: int = 2
    """Sessions per forward pass (gradients accumulate up to minibatch_size)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    lora_r: int = 16
    """LoRA rank; 0 trains every weight (the reference is then a frozen copy)."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_layers: int = 0
    """LoRA on the last this-many decoder layers only (0: every layer); the layers below then take no
    backward pass, which is most of an update's time on a CPU."""
    max_new_tokens: int = 96
    """Longest turn the policy may write during rollouts."""
    temperature: float = 1.0
    """Sampling temperature of free-decoding rollouts (1.0 samples the policy that the ratio is computed for);
    constrained rollouts always draw at 1."""
    rollout_batch_size: int = 8
    """Prompts per generate call."""
    max_turns: int = 3
    """LLM turns allowed per session before the question counts as wrong."""
    choice_head: bool = False
    """Constrained only: a linear head on the choice state (the prompt's final hidden state, standardised by the
    first rollouts' states) moves ``[SeekAdvice]``'s score, trained with the choice (``agile.executor.choice_head``);
    saved beside the model as ``choice_head.safetensors``, which evaluation and collection load with it."""
    freeze_lm: bool = False
    """With ``choice_head``: train the head alone (no LoRA). The model's function scores are then the ones each
    rollout recorded, so the update and the reference need no forward pass."""
    head_lr: float = 1e-2
    """AdamW learning rate of the choice head (its inputs are standardised)."""
    head_components: int = 0
    """The choice head reads the state's first this-many principal components (fitted on the first rollouts' states,
    each scaled to unit variance); 0 reads the whole standardised state."""
    restate_question: bool = False
    """The executor states the question again right before the choice
    (``ExecutorConfig.restate_question``)."""
    yes_no_threshold: float = 0.0
    """Constrained: the agent answers "yes" above this log-odds of yes against no
    (``ExecutorConfig.yes_no_threshold``)."""
    stop_when_flat: int = 0
    """Stop before ``iterations`` once the rollouts' advice rate and total score, averaged over the last
    this-many iterations, each moved less than ``flat_tolerance`` from the window before; 0 never stops."""
    flat_tolerance: float = 0.03
    """How little the two windows may differ to count as flat."""
    seed: int = 0
    """Seed of episode sampling, initialisation and sampling."""
    device: str | None = None
    """Torch device (default: cuda when available, else cpu)."""
    cpu_threads: int = 0
    """torch CPU threads; 0 keeps torch's default (1 is fastest on a busy shared machine)."""
    out: str = "runs/agile_ppo"
    """Where the merged model (model/), value head and per-iteration log go."""
    save: bool = True
    """Write the trained model to out/model."""


@dataclass
class Sample:
    """One session as a training sample."""

    input_ids: list[int]
    action_mask: list[int]
    reward: float
    """The proxy reward r + A_i of the session."""
    task: int = 0
    """Sessions rolled out from the same state share a task id (loop and grpo group by it)."""


# ---------------------------------------------------------------------------------------------
# Losses (all averaged over action tokens only: ``mask`` is the action mask)
# ---------------------------------------------------------------------------------------------

def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` where ``mask`` is set; masked positions contribute nothing, not even NaN."""
    keep = mask.bool()
    return torch.where(keep, x, torch.zeros_like(x)).sum() / keep.sum().clamp(min=1)


def policy_loss(logp, old_logp, advantages, mask, clip_eps):
    """PPO's clipped surrogate per token; returns ``(loss, clip_fraction, approx_kl_to_old)``."""
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_fraction = masked_mean(((ratio - 1.0).abs() > clip_eps).float(), mask)
        approx_kl = masked_mean(old_logp - logp, mask)
    return loss, clip_fraction, approx_kl


def value_loss(values, old_values, returns, mask, clip_eps):
    """Clipped value loss ``0.5 * max((V - R)^2, (V_clip - R)^2)`` per token."""
    clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask)


def kl_k3(logp, ref_logp, mask):
    """Unbiased, non-negative KL(pi || pi_ref) estimator ``exp(d) - d - 1``, d = ref - logp."""
    d = ref_logp - logp
    return masked_mean(torch.exp(d) - d - 1.0, mask)


# ---------------------------------------------------------------------------------------------
# Rollout: episodes of the executor, K copies of every session
# ---------------------------------------------------------------------------------------------

def proxy_bonus(record: SessionRecord, beta: float) -> float:
    """AGILE's A_i: ``beta * 1[similar question later] / (similar entries in memory + 1)``
    for a session that sought advice, else 0."""
    if not record.advised:
        return 0.0
    return beta * float(record.similar_later) / (record.n_similar + 1)


def sample_episodes(groups, n_questions: int, n_episodes: int, rng: random.Random):
    """``(group, questions)`` windows of consecutive questions, group and start drawn at random."""
    out = []
    for _ in range(n_episodes):
        group = rng.choice(groups)
        n = min(n_questions, len(group.questions))
        start = rng.randrange(0, len(group.questions) - n + 1)
        out.append((group, group.questions[start:start + n]))
    return out


def collect(policy: LLMPolicy, episodes, tokenizer, embedder, exec_cfg: ExecutorConfig,
            k: int, dbs: dict, tag: str, spread: bool = False) -> tuple[list[SessionRecord], list[int], list[list]]:
    """Run the episodes, every session K times from the same state; returns records, task ids and, per
    record, the function choices a ``DecisionTracker`` policy sampled in it (empty lists otherwise).
    ``spread``: the K copies of a session draw their first function without replacement."""
    from agile.executor.memory import Memory

    mains = [Executor(g, qs, tokenizer, Memory(embedder), exec_cfg, db=dbs[g.name],
                      episode_id=f"{tag}-{e}-{g.name}-{qs[0].id}", end=0)
             for e, (g, qs) in enumerate(episodes)]
    records, tasks, decisions = [], [], []
    n_sessions = max(len(qs) for _, qs in episodes)
    for i in range(n_sessions):
        live = [m for m in mains if i < len(m.questions)]
        branches = [[m.clone() for _ in range(k)] if k > 1 else [m] for m in live]
        for e, copies in enumerate(branches):
            for j, b in enumerate(copies):
                b.resume(i + 1)
                if spread:
                    b.spread_draw = (f"{tag}-{i}-{e}", j)
        run_executors([b for copies in branches for b in copies], policy)
        for main, copies in zip(live, branches):
            task = tasks[-1] + 1 if tasks else 0
            for b in copies:
                records.append(b.records[-1])
                tasks.append(task)
                decisions.append(policy.take(b) if hasattr(policy, "take") else [])
            # The episode goes on from the first copy: its memory holds that session's writes.
            mains[mains.index(main)] = copies[0]
    return records, tasks, decisions


# ---------------------------------------------------------------------------------------------
# From samples to advantages: one no-grad pass for old log-probs, values and reference log-probs
# ---------------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """Per-session tensors (length of each session) needed by the update."""

    samples: list[Sample]
    old_logp: list[torch.Tensor]
    ref_logp: list[torch.Tensor]
    old_values: list[torch.Tensor]
    advantages: list[torch.Tensor]
    returns: list[torch.Tensor]
    kl: float
    """Mean log pi_old - log pi_ref over action tokens."""
    seconds: float
    tokens: int


@torch.no_grad()
def prepare(model: ActionLM, ref_lm, samples: list[Sample], cfg: PPOConfig, pad_id: int,
            device) -> Prepared:
    """Score the samples with the rollout policy and the reference, then compute advantages."""
    start = time.perf_counter()
    model.eval()
    old_logp, ref_logp, old_values = [], [], []
    for begin in range(0, len(samples), cfg.micro_batch_size):
        chunk = samples[begin:begin + cfg.micro_batch_size]
        batch = {k: t.to(device) for k, t in
                 pad_batch([(s.input_ids, s.action_mask) for s in chunk], pad_id).items()}
        out = model(batch["input_ids"], batch["attention_mask"], batch["action_mask"])
        ref = _reference_logp(model, ref_lm, batch)
        for row, s in enumerate(chunk):
            n = len(s.input_ids)
            old_logp.append(out["logp"][row, :n].cpu())
            ref_logp.append(ref[row, :n].cpu())
            values = out.get("values")
            old_values.append(values[row, :n].cpu() if values is not None else torch.zeros(n))
    masks = [_action_positions(s) for s in samples]
    kl_tokens = torch.cat([(o - r)[m] for o, r, m in zip(old_logp, ref_logp, masks)])
    advantages = [torch.zeros(len(s.input_ids)) for s in samples]
    returns = [torch.zeros(len(s.input_ids)) for s in samples]
    if cfg.estimator == "gae":
        # Per-token rewards: the KL penalty on every action token, the session's reward on the last.
        rewards, values, segments = [], [], []
        for i, (s, o, r, v, m) in enumerate(zip(samples, old_logp, ref_logp, old_values, masks)):
            token_rewards = -cfg.kl_coef * (o - r)[m]
            if token_rewards.numel():
                token_rewards[-1] += s.reward
            rewards.append(token_rewards)
            values.append(v[m])
            segments.append(torch.full((int(m.sum()),), i))
        adv, ret = gae_segments(torch.cat(rewards), torch.cat(values), torch.cat(segments),
                                cfg.gamma, cfg.lam)
        if cfg.whiten_advantages:
            adv = whiten(adv)
        offset = 0
        for i, m in enumerate(masks):
            n = int(m.sum())
            advantages[i][m] = adv[offset:offset + n]
            returns[i][m] = ret[offset:offset + n]
            offset += n
    else:
        from agile.train.choices import session_advantages

        for i, a in enumerate(session_advantages([s.reward for s in samples], [s.task for s in samples], cfg.estimator)):
            advantages[i][masks[i]] = a
    return Prepared(samples, old_logp, ref_logp, old_values, advantages, returns,
                    float(kl_tokens.mean()) if kl_tokens.numel() else 0.0,
                    time.perf_counter() - start, sum(len(s.input_ids) for s in samples))


def _action_positions(sample: Sample) -> torch.Tensor:
    mask = torch.tensor(sample.action_mask, dtype=torch.bool)
    mask[:1] = False  # as pad_batch: the first token has no context to be predicted from
    return mask


def _reference_logp(model: ActionLM, ref_lm, batch) -> torch.Tensor:
    if ref_lm is None:  # LoRA: the reference is the same weights with the adapters off
        with model.lm.disable_adapter():
            return model(batch["input_ids"], batch["attention_mask"], batch["action_mask"])["logp"]
    return ref_lm(batch["input_ids"], batch["attention_mask"], batch["action_mask"])["logp"]


# ---------------------------------------------------------------------------------------------
# The update: clipped surrogate + value loss (+ KL term for loop/grpo), action tokens only
# ---------------------------------------------------------------------------------------------

def _pad(tensors: list[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros((len(tensors), width))
    for row, t in enumerate(tensors):
        out[row, :len(t)] = t
    return out


def update(policy, optimizer, prepared: Prepared, cfg: PPOConfig, pad_id: int, accelerator,
           rng: random.Random) -> dict[str, float]:
    """``update_epochs`` passes of minibatch PPO steps; returns mean losses and statistics.

    Processes may hold different numbers of sessions (episodes of different lengths); every
    process uses the fewest any of them holds (a fresh random subset each epoch), so all take
    the same optimizer steps and the same forward passes, and none waits forever for another."""
    start = time.perf_counter()
    policy.train()
    params = [p for p in policy.parameters() if p.requires_grad]
    stats = {"pg_loss": [], "vf_loss": [], "kl_loss": [], "clip_fraction": [], "approx_kl": []}
    n = fewest(len(prepared.samples), accelerator)
    tokens = steps = 0
    for _ in range(cfg.update_epochs):
        order = list(range(len(prepared.samples)))
        rng.shuffle(order)
        order = order[:n]
        for begin in range(0, n, cfg.minibatch_size):
            rows = order[begin:begin + cfg.minibatch_size]
            n_action = sum(sum(prepared.samples[i].action_mask[1:]) for i in rows)
            micro = [rows[j:j + cfg.micro_batch_size] for j in range(0, len(rows), cfg.micro_batch_size)]
            for k, chunk in enumerate(micro):
                samples = [prepared.samples[i] for i in chunk]
                batch = pad_batch([(s.input_ids, s.action_mask) for s in samples], pad_id)
                width = batch["input_ids"].shape[1]
                old_logp, ref_logp, old_values, adv, ret = (
                    _pad([getattr(prepared, name)[i] for i in chunk], width).to(accelerator.device)
                    for name in ("old_logp", "ref_logp", "old_values", "advantages", "returns"))
                batch = {key: t.to(accelerator.device) for key, t in batch.items()}
                mask = batch["action_mask"]
                # Micro-batches are weighted by their share of the minibatch's action tokens, so
                # the step's loss is the token mean over the whole minibatch.
                weight = mask.sum().item() / max(n_action, 1)
                sync = accelerator.no_sync(policy) if k < len(micro) - 1 else _Null()
                with sync:
                    out = policy(batch["input_ids"], batch["attention_mask"], mask)
                    pg, clip_fraction, approx_kl = policy_loss(out["logp"], old_logp, adv, mask,
                                                               cfg.clip_eps)
                    loss = pg
                    if cfg.estimator == "gae":
                        vf = value_loss(out["values"], old_values, ret, mask, cfg.value_clip_eps)
                        loss = loss + cfg.vf_coef * vf
                        stats["vf_loss"].append(vf.item())
                    else:
                        kl = kl_k3(out["logp"], ref_logp, mask)
                        loss = loss + cfg.kl_coef * kl
                        stats["kl_loss"].append(kl.item())
                    accelerator.backward(loss * weight)
                tokens += int(batch["attention_mask"].sum())
                stats["pg_loss"].append(pg.item())
                stats["clip_fraction"].append(clip_fraction.item())
                stats["approx_kl"].append(approx_kl.item())
            accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
    policy.eval()
    seconds = time.perf_counter() - start
    out = update_summary(stats)
    out.update(update_seconds=seconds, update_tokens=tokens, optimizer_steps=steps, update_sessions=n,
               update_tokens_per_s=tokens / seconds if seconds else 0.0)
    return out


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------------------------
# Setup shared by train() and the benchmarks
# ---------------------------------------------------------------------------------------------

def build_policy(lm, cfg: PPOConfig):
    """``(ActionLM with LoRA [+ value head], reference or None)`` for ``cfg``."""
    from agile.train.sft import add_lora

    from agile.executor.choice_head import ChoiceHead

    ref = None
    if cfg.freeze_lm:  # the head alone trains; the reference is the model's own recorded scores
        lm.requires_grad_(False)
        model = ActionLM(lm)
    else:
        if cfg.lora_r <= 0:
            ref = ActionLM(copy.deepcopy(lm)).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
        model = ActionLM(add_lora(lm, cfg.lora_r, cfg.lora_alpha, 0.0, last_layers=cfg.lora_layers),
                         value_head=cfg.estimator == "gae")
    if cfg.choice_head:
        model.choice_head = ChoiceHead(model.hidden_size, cfg.head_components).to(next(lm.parameters()).device)
    return model, ref


def param_groups(model: ActionLM, cfg: PPOConfig) -> list[dict]:
    """The optimizer's groups: the LM's trainable weights (and value head) at ``lr``, the choice head at
    ``head_lr``."""
    head = set(map(id, model.choice_head.parameters())) if model.choice_head is not None else set()
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in head]
    groups = [{"params": rest, "lr": cfg.lr}] if rest else []
    if head:
        groups.append({"params": list(model.choice_head.parameters()), "lr": cfg.head_lr})
    return groups


def peak_memory_mb(device) -> float:
    """Peak resident memory of this process (CPU) or peak allocated GPU memory, in MiB."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def sum_over_processes(accelerator, value: int, device) -> int:
    """``value`` summed over the data-parallel processes (itself with one process)."""
    if accelerator.num_processes == 1:
        return int(value)
    return int(accelerator.reduce(torch.tensor([int(value)], device=device), reduction="sum").item())


def check_config(cfg: PPOConfig) -> None:
    if cfg.estimator not in ("gae", "loop", "grpo", *DISTINCT_DRAWS):
        raise ValueError(f"PPOConfig.estimator is {cfg.estimator!r}; use gae, loop, grpo, distinct or natural.")
    if cfg.estimator in DISTINCT_DRAWS and cfg.decoding != "constrained":
        raise ValueError(f"PPOConfig.estimator={cfg.estimator} draws distinct functions for a session's copies, which "
                         "only constrained decoding does: set decoding=constrained or use gae, loop or grpo.")
    if cfg.estimator in ("loop", "grpo", *DISTINCT_DRAWS) and cfg.rollouts_per_task < 2:
        raise ValueError(f"PPOConfig.estimator={cfg.estimator} compares rollouts of the same "
                         f"session, so rollouts_per_task must be >= 2 (got {cfg.rollouts_per_task}).")
    if cfg.decoding == "constrained" and cfg.estimator == "gae":
        raise ValueError("PPOConfig.decoding=constrained trains one function choice per session, with no critic: "
                         "use estimator loop or grpo (with rollouts_per_task >= 2).")
    if cfg.decoding not in ("free", "constrained"):
        raise ValueError(f"PPOConfig.decoding is {cfg.decoding!r}; use free or constrained.")
    if cfg.stop_when_flat < 0 or cfg.flat_tolerance < 0:
        raise ValueError("PPOConfig.stop_when_flat and flat_tolerance must be >= 0.")
    if cfg.lora_layers < 0:
        raise ValueError(f"PPOConfig.lora_layers is {cfg.lora_layers}; use 0 (every layer) or a positive count.")
    if cfg.choice_head and cfg.decoding != "constrained":
        raise ValueError("PPOConfig.choice_head moves the constrained policy's [SeekAdvice] score: set "
                         "decoding=constrained, or choice_head=False.")
    if cfg.freeze_lm and not cfg.choice_head:
        raise ValueError("PPOConfig.freeze_lm trains the choice head alone: set choice_head=True too, or "
                         "freeze_lm=False.")
    if cfg.minibatch_size < 1 or cfg.micro_batch_size < 1:
        raise ValueError("PPOConfig.minibatch_size and micro_batch_size must be >= 1.")


# ---------------------------------------------------------------------------------------------
# Algorithm 1
# ---------------------------------------------------------------------------------------------

def rollout_setting(cfg: PPOConfig) -> tuple[list, dict, ExecutorConfig]:
    """What ``cfg``'s rollouts play: its train groups, their product tables and the executor's settings."""
    from agile.envs.product_db import ProductDB
    from agile.envs.productqa import default_productqa_root, load_split

    root = cfg.data_root or default_productqa_root()
    groups = [g for g in load_split(root, "train") if not cfg.groups or g.name in cfg.groups]
    if not groups:
        raise ValueError(f"no train group of {root} matches groups={cfg.groups}; leave groups "
                         "empty or name folders of the train split.")
    exec_cfg = ExecutorConfig(advice_cost=cfg.advice_cost, max_turns=cfg.max_turns,
                              similarity_threshold=cfg.similarity_threshold,
                              restate_question=cfg.restate_question, yes_no_threshold=cfg.yes_no_threshold)
    return groups, {g.name: ProductDB(g) for g in groups}, exec_cfg


def train(cfg: PPOConfig, log=print) -> dict:
    """Run session-level PPO; returns ``{"history": [...], "model": ActionLM, ...}``.

    After every iteration the trainable weights, the optimizer, the random streams and the history go
    to ``out/checkpoint.pt``; a run started again with the same config goes on from there."""
    from agile.train.checkpoint import load_checkpoint, save_checkpoint

    check_config(cfg)
    run = _start(cfg)
    accelerator, raw = run.accelerator, run.raw
    out = Path(cfg.out)
    state = load_checkpoint(out, cfg, raw, run.optimizer, run.rng, run.rollout_policy, accelerator.process_index)
    history, rollout_log, training_human_calls = state["history"], state["rollout_log"], state["human_calls"]
    if history:
        log(f"ppo: resuming {out} after iteration {len(history)}")
    for it in range(len(history), cfg.iterations):
        if _flat(history, cfg):
            log(f"ppo: advice rate and total score flat over the last {2 * cfg.stop_when_flat} iterations; stopping")
            break
        done = _iteration(run, cfg, it)
        training_human_calls += done.human_calls
        rollout_log.append(done.rollout_lines)
        history.append(done.row)
        save_checkpoint(out, cfg, raw, run.optimizer, run.rng, run.rollout_policy, accelerator,
                        {"history": history, "rollout_log": rollout_log, "human_calls": training_human_calls})
        if accelerator.is_main_process:
            log(done.message)
    accelerator.wait_for_everyone()
    total_sessions = sum_over_processes(accelerator, sum(row["sessions"] for row in history), accelerator.device)
    result = {"history": history, "processes": accelerator.num_processes, "config": asdict(cfg),
              "training_human_calls": training_human_calls}
    if accelerator.is_main_process:
        _write_outputs(out, cfg, run, result, rollout_log, total_sessions)
    accelerator.wait_for_everyone()
    result["model"] = raw
    result["accelerator"] = accelerator
    return result


# ---- train's steps ------------------------------------------------------------------------------


@dataclass
class _Run:
    """What every iteration works with: the policy and its optimizer, the rollout setting, the random stream."""

    accelerator: object
    raw: ActionLM  # the policy unwrapped: what rolls out, is scored and saved
    policy: object  # the same, as the accelerator wraps it for the free-decoding update
    ref: object | None  # the reference model, where it is not the policy with its adapters off
    optimizer: torch.optim.Optimizer
    tokenizer: object
    rollout_policy: LLMPolicy
    actor: object  # what the executor asks: the rollout policy, its choices tracked under constrained decoding
    reference: object | None  # constrained decoding: the reference's distribution over the allowed functions
    groups: list
    dbs: dict
    exec_cfg: ExecutorConfig
    yes_no_of: dict  # (group, question id) -> a yes/no question, for the advice rate by phrasing
    embedder: object
    rng: random.Random


def _start(cfg: PPOConfig) -> _Run:
    """Load the policy, wrap it for the accelerator and set up the rollouts (each process its own streams)."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from agile.envs.phrasing import is_yes_no_question
    from agile.executor.memory import Embedder
    from agile.models import load_causal_lm
    from agile.train.choices import DecisionTracker, ReferenceScorer

    accelerator = Accelerator(cpu=cfg.device == "cpu")
    set_seed(cfg.seed)
    if cfg.cpu_threads > 0:
        torch.set_num_threads(cfg.cpu_threads)
    device = accelerator.device
    lm, tokenizer = load_causal_lm(cfg.model, device=str(device), seed=cfg.seed)
    model, ref = build_policy(lm, cfg)
    if ref is not None:
        ref.to(device)
    optimizer = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr)
    policy, optimizer = accelerator.prepare(model, optimizer)
    raw = accelerator.unwrap_model(policy)

    groups, dbs, exec_cfg = rollout_setting(cfg)
    yes_no_of = {(g.name, q.id): is_yes_no_question(q.question) for g in groups for q in g.questions}
    embedder = Embedder()
    # Every process draws its own episodes; the update averages their gradients.
    rng = random.Random(cfg.seed * 1000 + accelerator.process_index)
    torch.manual_seed(cfg.seed * 1000 + accelerator.process_index)
    constrained = cfg.decoding == "constrained"
    rollout_policy = LLMPolicy(raw.lm, tokenizer, cfg.max_new_tokens, greedy=False,
                               temperature=cfg.temperature, batch_size=cfg.rollout_batch_size,
                               decoding=cfg.decoding, seed=cfg.seed * 1000 + accelerator.process_index,
                               choice_head=raw.choice_head)
    actor = DecisionTracker(rollout_policy) if constrained else rollout_policy
    reference = ReferenceScorer(raw, None if ref is None else ref.lm) if constrained and not cfg.freeze_lm else None
    return _Run(accelerator, raw, policy, ref, optimizer, tokenizer, rollout_policy, actor, reference, groups, dbs,
                exec_cfg, yes_no_of, embedder, rng)


@dataclass
class _Iteration:
    """One iteration's history row, its human calls (over every process), its rollout log and its log line."""

    row: dict
    human_calls: int
    rollout_lines: str
    message: str


def _iteration(run: _Run, cfg: PPOConfig, it: int) -> _Iteration:
    """Steps 1-4 of the module docstring: roll out, reward, advantages and update; then the iteration's row."""
    raw, rollout_policy, accelerator, device = run.raw, run.rollout_policy, run.accelerator, run.accelerator.device
    # 1. rollout
    raw.eval()
    gen_tokens, prompt_tokens, gen_seconds = (rollout_policy.generated_tokens,
                                              rollout_policy.prompt_tokens, rollout_policy.seconds)
    start = time.perf_counter()
    episodes = sample_episodes(run.groups, cfg.questions_per_episode, cfg.episodes_per_iteration, run.rng)
    records, tasks, decisions = collect(run.actor, episodes, run.tokenizer, run.embedder, run.exec_cfg,
                                        cfg.rollouts_per_task, run.dbs, tag=f"it{it}-p{accelerator.process_index}",
                                        spread=cfg.estimator in DISTINCT_DRAWS)
    rollout_seconds = time.perf_counter() - start
    # Each advice in a rollout was answered by a person: the human calls this training spends.
    human_calls = sum_over_processes(accelerator, sum(r.advised for r in records), device)
    rollout_lines = _rollout_lines(records, decisions)
    # 2. proxy reward r + A_i
    bonuses = [proxy_bonus(r, cfg.proxy_beta) for r in records]
    rewards = [r.reward + b for r, b in zip(records, bonuses)]
    # 3-4. advantages, then the update
    if cfg.decoding == "constrained":
        prepared_kl, score_seconds, score_tokens, stats = _choice_step(
            raw, run.reference, run.optimizer, decisions, rewards, tasks, cfg, accelerator, run.rng)
    else:
        samples = [Sample(r.input_ids, r.action_mask, reward, t) for r, reward, t in zip(records, rewards, tasks)]
        prepared = prepare(raw, run.ref, samples, cfg, run.tokenizer.pad_token_id, device)
        stats = update(run.policy, run.optimizer, prepared, cfg, run.tokenizer.pad_token_id, accelerator, run.rng)
        prepared_kl, score_seconds, score_tokens = prepared.kl, prepared.seconds, prepared.tokens
    rollout_policy.weights_changed()
    metrics = summarize([r.correct for r in records], [r.advised for r in records], cfg.advice_cost)
    generated = rollout_policy.generated_tokens - gen_tokens
    row = {"iteration": it + 1, "sessions": len(records), **metrics,
           **advice_by_phrasing(records, decisions, run.yes_no_of), "human_calls": human_calls,
           "mean_reward": sum(rewards) / max(len(rewards), 1),
           "mean_bonus": sum(bonuses) / max(len(bonuses), 1),
           "kl_to_reference": prepared_kl, **stats,
           "rollout_seconds": rollout_seconds,
           "rollout_generated_tokens": generated,
           "rollout_prompt_tokens": rollout_policy.prompt_tokens - prompt_tokens,
           "rollout_generated_tokens_per_s": generated / max(rollout_policy.seconds - gen_seconds, 1e-9),
           "score_seconds": score_seconds, "score_tokens_per_s": score_tokens / max(score_seconds, 1e-9),
           "peak_memory_mb": peak_memory_mb(device)}
    message = (f"ppo iteration {it + 1}/{cfg.iterations}: reward {row['mean_reward']:.3f} "
               f"acc {row['accuracy']:.3f} advice {row['advice_rate']:.3f} "
               f"P(ask) yes/no {row.get('ask_prob_yes_no', float('nan')):.3f} "
               f"other {row.get('ask_prob_other', float('nan')):.3f} kl {prepared_kl:.4f} "
               f"pg {stats['pg_loss']:.4f} clip {stats['clip_fraction']:.3f} "
               f"rollout {rollout_seconds:.0f}s update {stats['update_seconds']:.0f}s")
    return _Iteration(row, human_calls, rollout_lines, message)


def _write_outputs(out: Path, cfg: PPOConfig, run: _Run, result: dict, rollout_log: list[str],
                   total_sessions: int) -> None:
    """The main process's files: the heads and model, the history, the metrics, the rollout log and the curve."""
    raw, history, training_human_calls = run.raw, result["history"], result["training_human_calls"]
    out.mkdir(parents=True, exist_ok=True)
    if raw.choice_head is not None:  # small: written even without the model, to run beside the base model
        raw.choice_head.save(out)
    if cfg.save:
        from agile.train.sft import save_model

        if raw.value is not None:
            torch.save(raw.value.state_dict(), out / "value_head.pt")
        result["model_dir"] = str(save_model(raw, run.tokenizer, out / "model"))
        if raw.choice_head is not None:
            raw.choice_head.save(out / "model")
    (out / "ppo_history.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "metrics.json").write_text(json.dumps(
        {"training_human_calls": training_human_calls, "rollout_sessions": total_sessions,
         "iterations": len(history), "advice_cost": cfg.advice_cost}, indent=1))
    # The main process's rollout sessions (every process's advice is in training_human_calls).
    (out / "rollouts.jsonl").write_text("".join(rollout_log))
    plot_curve(history, out / "ppo_curve.png", cfg.advice_cost)


def _rollout_lines(records: list[SessionRecord], decisions: list[list]) -> str:
    """The sessions as JSON lines, each with its first choice's ``ask_prob`` and ``greedy_ask`` where
    ``[SeekAdvice]`` was a candidate (the policy at the draw, whatever the copy drew)."""
    from agile import functions as fn

    lines = []
    for line, choices in zip(records_to_jsonl(records).splitlines(), decisions):
        row = json.loads(line)
        first = choices[0] if choices else None
        if first is not None and fn.SEEK_ADVICE in first.functions:
            a = first.functions.index(fn.SEEK_ADVICE)
            row["ask_prob"] = float(torch.tensor(first.logps)[a].exp())
            row["greedy_ask"] = max(range(len(first.logps)), key=first.logps.__getitem__) == a
            row["yes_no"] = first.yes_no
        lines.append(json.dumps(row) + "\n")
    return "".join(lines)


def advice_by_phrasing(records: list[SessionRecord], decisions: list[list], yes_no_of: dict) -> dict:
    """The rollouts' advice rate split by the question's phrasing (yes/no or not, what the agent sees), and
    for a constrained policy the probability it gave ``[SeekAdvice]`` at each session's first choice and the
    share of first choices where that was the most probable function (what a greedy agent would do)."""
    from agile import functions as fn

    out, all_probs = {}, []
    for kind, want in (("yes_no", True), ("other", False)):
        rows = [i for i, r in enumerate(records) if yes_no_of.get((r.group, r.question_id)) is want]
        out[f"advice_rate_{kind}"] = sum(records[i].advised for i in rows) / len(rows) if rows else float("nan")
        out[f"sessions_{kind}"] = len(rows)
        probs, greedy = [], []
        for i in rows:
            first = decisions[i][0] if decisions[i] else None
            if first is not None and fn.SEEK_ADVICE in first.functions:
                a = first.functions.index(fn.SEEK_ADVICE)
                probs.append(float(torch.tensor(first.logps)[a].exp()))
                greedy.append(float(max(range(len(first.logps)), key=first.logps.__getitem__) == a))
        all_probs += probs
        if probs:
            out[f"ask_prob_{kind}"] = sum(probs) / len(probs)
            out[f"greedy_ask_{kind}"] = sum(greedy) / len(greedy)
    if all_probs:
        out["ask_prob"] = sum(all_probs) / len(all_probs)
    return out


def _choice_step(raw, reference, optimizer, decisions, rewards, tasks, cfg: PPOConfig, accelerator, rng):
    """Constrained decoding's step (``agile.train.choices``): reference, advantages, update."""
    from agile.train.choices import ChoiceSample, choice_advantages, mean_kl_to_reference, update_choices

    from agile.train.choices import frozen_reference

    start = time.perf_counter()
    samples = [ChoiceSample(d, reward, t) for d, reward, t in zip(decisions, rewards, tasks)]
    if raw.choice_head is not None:
        fit_head_standardiser(raw.choice_head, samples, accelerator)
    (frozen_reference if reference is None else reference)(samples)
    choice_advantages(samples, cfg.estimator)
    kl = mean_kl_to_reference(samples)
    seconds = time.perf_counter() - start
    stats = update_choices(raw, optimizer, samples, cfg, accelerator, rng)
    return kl, seconds, sum(len(d.prompt) for s in samples for d in s.decisions), stats


def fit_head_standardiser(head, samples, accelerator) -> None:
    """The choice head's mean and deviation from the first rollouts' choice states (every process's: the head is
    one module of the model, the same on every process); later iterations keep them."""
    if bool(head.fitted):
        return
    states = [d.state for s in samples for d in s.decisions if d.state is not None]
    width = head.mean.numel()
    moments = torch.zeros(2 * width + 1, device=head.weight.device)
    if states:
        x = torch.stack(states).float().to(head.weight.device)
        moments = torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(len(x))], device=x.device)])
    if accelerator.num_processes > 1:
        moments = accelerator.reduce(moments, reduction="sum")
    n = float(moments[-1])
    if n < 2:
        return
    mean = moments[:width] / n
    var = (moments[width:2 * width] - n * mean * mean) / (n - 1)
    sd = var.clamp(min=0).sqrt()
    with torch.no_grad():
        head.mean.copy_(mean)
        # A coordinate that hardly varies over the first states is not blown up into a huge input later.
        head.scale.copy_(sd.clamp(min=0.01 * float(sd.mean()) + 1e-6))
        if len(head.basis):
            head.basis.copy_(principal_basis(states, head, accelerator))
        head.fitted.fill_(True)


def principal_basis(states: list[torch.Tensor], head, accelerator) -> torch.Tensor:
    """The first ``len(head.basis)`` principal directions of the standardised ``states``, each divided by its
    deviation (projected states have unit variance); process 0's, the same on every process."""
    k = len(head.basis)
    x = (torch.stack(states).float().to(head.weight.device) - head.mean) / head.scale
    if len(x) <= k:
        raise ValueError(f"PPOConfig.head_components={k} needs more first-iteration choice states than that (got "
                         f"{len(x)}); roll out more episodes an iteration or use fewer components.")
    _, singular, vt = torch.linalg.svd(x - x.mean(0), full_matrices=False)
    basis = vt[:k] / (singular[:k, None] / (len(x) - 1) ** 0.5).clamp(min=1e-6)
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast

        basis = broadcast(basis.contiguous(), from_process=0)
    return basis


def _flat(history: list[dict], cfg: PPOConfig) -> bool:
    """Whether the rollouts' advice rate and total score stopped moving (``PPOConfig.stop_when_flat``)."""
    w = cfg.stop_when_flat
    if w <= 0 or len(history) < 2 * w:
        return False

    def mean(key, rows):
        return sum(r[key] for r in rows) / len(rows)

    last, before = history[-w:], history[-2 * w:-w]
    # With distinct draws the rollouts' advice is set by the draw (one copy in K asks), not by the policy: its
    # probability of asking is what moves.
    keys = ("ask_prob",) if cfg.estimator in DISTINCT_DRAWS else ("advice_rate", "total_score")
    return all(abs(mean(k, last) - mean(k, before)) < cfg.flat_tolerance for k in keys)


def plot_curve(history: list[dict], path: Path, advice_cost: float) -> None:
    """The rollouts' advice rate and total score per iteration (is PPO done learning?)."""
    if not history:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    its = [r["iteration"] for r in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("advice_rate", "advice rate"), ("total_score", "total score"), ("accuracy", "accuracy"),
                       ("ask_prob_yes_no", "P(ask), yes/no-phrased"), ("ask_prob_other", "P(ask), other")):
        if all(key in r for r in history):
            ax.plot(its, [r[key] for r in history], marker="o", label=label,
                    linestyle="--" if key.startswith("ask_prob") else "-")
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel("rollout sessions")
    ax.set_title(f"PPO at advice cost {advice_cost:g}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
