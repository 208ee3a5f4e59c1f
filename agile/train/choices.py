"""PPO over the constrained policy's function choices (``PPOConfig.decoding = "constrained"``).

The constrained policy (``agile.executor.constrained``) writes a turn in two steps: the function, by
the model's log-probability among the ones the executor allows, then the answer in its most probable
form. In rollouts the function is **sampled** instead, from

    pi(f | s) = exp(log p(f | s)) / sum over allowed g of exp(log p(g | s)),

log p(f | s) being the log-probability of the function's whole token sequence after the context s. That
choice (ask for advice, search, answer) is PPO's action: its ratio and its KL to the reference are
taken over the allowed set only, so probability the model puts on tokens it may not write never
enters the loss, and the KL is exact (a sum over a few functions, not an estimate). The answer's form
stays the most probable one and is not trained. A turn with one allowed function (``[Reflection]``)
is no choice and has no term.

Advantages are critic-free (``loop`` or ``grpo`` over the K rollouts of a session): one decision per
session, mostly, leaves a value head little to learn from. ``distinct`` draws the K copies' first functions
without replacement and gives each its share of the all-action gradient (``distinct_advantages``): the K
copies then always compare asking with not asking, where sampled copies mostly agree with a policy that
asks with probability 0.9.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from agile.models import cache_arg, returned_cache


@dataclass
class Decision:
    """One sampled function choice of a rollout."""

    prompt: list[int]
    candidates: list[list[int]]
    """Token ids of each allowed function's name, in the order they were scored."""
    chosen: int
    logp: float
    """log pi(chosen | prompt) under the rollout's weights, renormalised over the candidates."""
    logps: list[float] = field(default_factory=list)
    """log pi(candidate | prompt) of every candidate, renormalised (what the policy was at the draw)."""
    functions: list[str] = field(default_factory=list)
    """The candidates' function names, in the order of ``candidates``."""
    yes_no: bool = False
    """The question is phrased as a yes/no question (what the agent sees; ``agile.envs.phrasing``)."""
    spread: bool = False
    """Drawn without replacement among the copies of its session (estimator ``distinct``)."""
    base_scores: list[float] = field(default_factory=list)
    """The model's log-probability of each candidate, before a choice head moved ``[SeekAdvice]``'s."""
    state: torch.Tensor | None = None
    """The choice state the head read (``agile.executor.choice_head.choice_state``); None without a head."""


@dataclass
class ChoiceSample:
    """One rollout session: its sampled choices and its proxy reward."""

    decisions: list[Decision]
    reward: float
    task: int = 0
    advantage: float = 0.0
    later_advantage: float | None = None
    """The advantage of the session's choices after its first (estimator ``distinct``); None: ``advantage``."""
    ref_logp: list[torch.Tensor] = field(default_factory=list)
    """Per decision: the reference's renormalised log-probabilities of every candidate."""


class DecisionTracker:
    """Wraps a sampling constrained ``LLMPolicy``; keeps each executor's sampled choices."""

    def __init__(self, policy):
        self.policy = policy
        self._by_executor: dict[int, list[Decision]] = {}

    def __call__(self, executors):
        turns = self.policy(executors)
        for executor, decision in zip(executors, self.policy.last_decisions):
            if decision is not None:
                self._by_executor.setdefault(id(executor), []).append(Decision(**decision))
        return turns

    def take(self, executor) -> list[Decision]:
        """The choices sampled for ``executor`` since the last ``take`` (and forget them)."""
        return self._by_executor.pop(id(executor), [])


def choice_log_probs(lm, prompt: list[int], candidates: list[list[int]], head=None,
                     functions: list[str] | None = None) -> torch.Tensor:
    """``log pi(candidate | prompt)`` renormalised over ``candidates`` (differentiable, [n]); with a choice
    ``head`` (``agile.executor.choice_head``), ``[SeekAdvice]``'s score (``functions`` names the candidates) moved
    by it at the prompt's final hidden state, as the constrained decoder scores it.

    One forward pass over the prompt; the candidates then run as one batch on its keys and values."""
    from agile.executor.choice_head import backbone

    device = next(lm.parameters()).device
    # The wrapped model itself: LoRA lives in its layers (and disable_adapter still switches it off),
    # and its forward takes the cache under the current keyword.
    lm = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    out = backbone(lm)(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    state = out.last_hidden_state[0, -1]
    first = torch.log_softmax(lm.get_output_embeddings()(state).float(), -1)
    scores = torch.stack([first[c[0]] for c in candidates])
    longest = max(len(c) for c in candidates)
    if longest > 1:
        cache = DynamicCache(config=lm.config)
        for layer, kv in enumerate(returned_cache(out).layers):
            cache.update(kv.keys.expand(len(candidates), *kv.keys.shape[1:]),
                         kv.values.expand(len(candidates), *kv.values.shape[1:]), layer)
        # Right padding: positions before it never see it (causal).
        inputs = torch.tensor([c[:-1] + [c[-1]] * (longest - len(c)) for c in candidates],
                              device=device)[:, :longest - 1]
        positions = torch.arange(len(prompt), len(prompt) + longest - 1, device=device).expand(len(candidates), -1)
        logits = lm(input_ids=inputs, position_ids=positions, **cache_arg(lm, cache), use_cache=False).logits
        log_probs = torch.log_softmax(logits.float(), -1)
        rest = []
        for row, c in enumerate(candidates):
            steps = torch.arange(len(c) - 1, device=device)
            targets = torch.tensor(c[1:], dtype=torch.long, device=device)
            rest.append(log_probs[row, steps, targets].sum())
        scores = scores + torch.stack(rest)
    if head is not None:
        scores = head.shifted(scores, functions, state)
    return scores - torch.logsumexp(scores, 0)


def head_log_probs(decision: Decision, head) -> torch.Tensor:
    """``choice_log_probs`` of a policy whose LM is frozen (``PPOConfig.freeze_lm``): the model's scores are
    those the rollout recorded, so only the head's shift is computed (differentiable in the head, [n])."""
    scores = torch.tensor(decision.base_scores, dtype=torch.float32)
    if decision.state is not None:
        scores = head.shifted(scores, decision.functions, decision.state)
    return scores - torch.logsumexp(scores, 0)


def frozen_reference(samples: list[ChoiceSample]) -> None:
    """Every sample's ``ref_logp`` when the LM is frozen: the reference is the model without the head, whose
    scores the rollout recorded (no forward pass)."""
    for sample in samples:
        sample.ref_logp = [torch.tensor(d.base_scores) - torch.logsumexp(torch.tensor(d.base_scores), 0)
                           for d in sample.decisions]


class ReferenceScorer:
    """The reference's renormalised log-probabilities of each decision's candidates: the LoRA model with
    its adapters off (or a frozen copy), through a prompt cache kept across iterations, since the
    reference never changes (sessions of a group share their long opening, which then runs once)."""

    def __init__(self, model, ref_lm=None, cache_tokens: int = 16_384):
        from agile.agents.prompt_cache import PromptKVCache

        lm = ref_lm if ref_lm is not None else model.lm
        self.adapters = None if ref_lm is not None else model.lm
        self.base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
        self.cache = PromptKVCache(self.base, cache_tokens)

    def __call__(self, samples: list[ChoiceSample]) -> None:
        """Fill every sample's ``ref_logp``."""
        from agile.agents.prompt_cache import score_continuations

        off = self.adapters.disable_adapter() if self.adapters is not None else contextlib.nullcontext()
        with torch.no_grad(), off:
            for sample in samples:
                sample.ref_logp = []
                for d in sample.decisions:
                    logits, kv = self.cache.prefill(d.prompt)
                    scores = torch.tensor(score_continuations(self.base, logits, kv, d.candidates))
                    sample.ref_logp.append(scores - torch.logsumexp(scores, 0))


def choice_loss(new_logp: torch.Tensor, decision: Decision, advantage: float, ref_logp: torch.Tensor,
                clip_eps: float, kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate for one choice plus ``kl_coef`` x KL(pi || ref) over the candidates."""
    ratio = torch.exp(new_logp[decision.chosen] - decision.logp)
    surrogate = torch.maximum(-advantage * ratio, -advantage * torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps))
    kl = (new_logp.exp() * (new_logp - ref_logp)).sum()
    stats = {"clip_fraction": float((ratio.detach() - 1).abs() > clip_eps),
             "approx_kl": float(decision.logp - new_logp[decision.chosen].detach()), "kl_loss": float(kl.detach())}
    return surrogate + kl_coef * kl, stats


def mean_kl_to_reference(samples: list[ChoiceSample]) -> float:
    """KL(pi || ref) over each decision's allowed functions, exactly (a sum over a few), averaged over the
    decisions: what the loss penalises. The sampled log pi - log ref of the chosen function is no estimate of it
    when the K copies draw distinct functions (``distinct``), and it went negative there."""
    terms = [sum(math.exp(p) * (p - float(r[i])) for i, p in enumerate(d.logps))
             for s in samples for d, r in zip(s.decisions, s.ref_logp)]
    return sum(terms) / max(len(terms), 1)


def update_summary(stats: dict[str, list[float]]) -> dict[str, float]:
    """Means of an update's per-step statistics, and the first step's clip fraction and KL to the old policy."""
    out = {k: (sum(v) / len(v) if v else 0.0) for k, v in stats.items()}
    out["first_clip_fraction"] = stats["clip_fraction"][0] if stats["clip_fraction"] else 0.0
    out["first_approx_kl"] = stats["approx_kl"][0] if stats["approx_kl"] else 0.0
    return out


def update_choices(raw, optimizer, samples: list[ChoiceSample], cfg, accelerator, rng) -> dict[str, float]:
    """``update_epochs`` passes of minibatch PPO over the sessions' choices (gradients averaged over
    processes, which all take the same number of steps, as ``agile.train.ppo.update``)."""
    from agile.train.data_parallel import fewest

    start = time.perf_counter()
    raw.train()
    params = [p for p in raw.parameters() if p.requires_grad]
    stats: dict[str, list[float]] = {"pg_loss": [], "kl_loss": [], "clip_fraction": [], "approx_kl": []}
    n = fewest(len(samples), accelerator)
    steps = decisions = 0
    for _ in range(cfg.update_epochs):
        order = list(range(len(samples)))
        rng.shuffle(order)
        for begin in range(0, n, cfg.minibatch_size):
            rows = [samples[i] for i in order[:n][begin:begin + cfg.minibatch_size]]
            count = sum(len(s.decisions) for s in rows)
            for sample in rows:
                for j, (decision, ref) in enumerate(zip(sample.decisions, sample.ref_logp)):
                    if cfg.freeze_lm:
                        new = head_log_probs(decision, raw.choice_head)
                    else:
                        new = choice_log_probs(raw.lm, decision.prompt, decision.candidates, raw.choice_head,
                                               decision.functions)
                    advantage = sample.advantage if j == 0 or sample.later_advantage is None else sample.later_advantage
                    loss, step_stats = choice_loss(new, decision, advantage, ref, cfg.clip_eps, cfg.kl_coef)
                    (loss / count).backward()
                    stats["pg_loss"].append(float(loss.detach()))
                    for key, value in step_stats.items():
                        stats[key].append(value)
                    decisions += 1
            if accelerator.num_processes > 1:
                for p in params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    p.grad = accelerator.reduce(p.grad, reduction="mean")
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
    raw.eval()
    seconds = time.perf_counter() - start
    out = update_summary(stats)
    out.update(update_seconds=seconds, optimizer_steps=steps, update_sessions=n, update_decisions=decisions)
    return out


def session_advantages(rewards: list[float], tasks: list[int], estimator: str) -> list[float]:
    """Each session's advantage: ``loop`` (leave-one-out) or ``grpo`` over the K rollouts of its task."""
    from agile.train.advantages import grpo, loop

    by_task: dict[int, list[int]] = {}
    for i, task in enumerate(tasks):
        by_task.setdefault(task, []).append(i)
    sizes = {len(rows) for rows in by_task.values()}
    if len(sizes) != 1:
        raise ValueError(f"{estimator} needs the same number of rollouts per task, got sizes {sorted(sizes)}; "
                         "keep rollouts_per_task fixed.")
    index = torch.tensor(list(by_task.values()))
    adv = (loop if estimator == "loop" else grpo)(torch.tensor(rewards)[index])
    out = [0.0] * len(rewards)
    for row, rows in enumerate(index.tolist()):
        for k, i in enumerate(rows):
            out[i] = float(adv[row, k])
    return out


def choice_advantages(samples: list[ChoiceSample], estimator: str) -> None:
    """Set each sample's advantage (``session_advantages``, or ``distinct_advantages``, plain or natural)."""
    if estimator in DISTINCT_DRAWS:
        distinct_advantages(samples, natural=estimator == "natural")
        return
    for sample, a in zip(samples, session_advantages([s.reward for s in samples], [s.task for s in samples], estimator)):
        sample.advantage = a


def inclusion_probabilities(p: list[float], k: int) -> list[float]:
    """P(candidate i is among the first ``k`` draws without replacement from ``p``), exactly: a sum over the
    ordered draws, which are few (the candidates are two or three functions)."""
    n, m = len(p), min(k, len(p))
    out = [0.0] * n

    def walk(prefix: tuple[int, ...], prob: float) -> None:
        rest = [i for i in range(n) if i not in prefix and p[i] > 0]
        if len(prefix) == m or not rest:
            for i in prefix:
                out[i] += prob
            return
        # The mass left, summed afresh: total - drawn rounds to 0 when one candidate holds nearly all of it.
        left = float(sum(p[i] for i in rest))
        for i in rest:
            walk(prefix + (i,), prob * p[i] / left)

    walk((), 1.0)
    return out


DISTINCT_DRAWS = ("distinct", "natural")
"""Estimators whose K copies of a session draw distinct first functions."""


def distinct_advantages(samples: list[ChoiceSample], natural: bool = False) -> None:
    """Advantages of estimator ``distinct``: the K copies of a session took distinct first functions (drawn
    without replacement from pi, ``ConstrainedDecoder._spread_pick``), so each session's first choice gets the
    all-action policy gradient

        sum over functions a seen in the session's copies of  pi(a) / q(a) * (Q(a) - b) * grad log pi(a),

    Q(a) the mean reward of the copies that took a, q(a) the probability that a was among the drawn functions
    (1 for every function when K covers them all: then this is the exact gradient of the session's expected
    reward, with no sampling noise in the choice), and b the pi-weighted mean of the seen Q's. Each copy's
    advantage is its share of that sum. Why: the sampled estimator learns about an action only when the K
    copies happen to disagree, which a policy that asks with probability 0.95 does in one session in ten.
    A copy's later choices (after a failed turn) keep the plain Q(a) - b.

    ``natural``: each seen function's copies share Q(a) - mean of the seen Q's instead, with no pi(a) / q(a): the
    natural policy gradient of a softmax in its logits (the Fisher's pseudo-inverse times pi * (Q - b) is Q - b,
    so every logit moves by its advantage). The plain gradient of a choice shrinks as pi(a)(1 - pi(a)): a policy
    that asks with probability 0.9 where answering pays 0.23 more gets 0.02 a session, while the others' push to
    ask (0.08 at pi = 0.45) moves the LoRA's shared ask bias; the natural step keeps 0.11 a session whatever pi is.
    Not the gradient of the expected reward: it moves towards each session's best seen function."""
    by_task: dict[int, list[ChoiceSample]] = {}
    for s in samples:
        by_task.setdefault(s.task, []).append(s)
    for copies in by_task.values():
        first = [s.decisions[0] if s.decisions and s.decisions[0].spread else None for s in copies]
        if any(d is None for d in first):  # no drawn choice in some copy: plain leave-one-out-free centring
            mean = sum(s.reward for s in copies) / len(copies)
            for s in copies:
                s.advantage = s.reward - mean
            continue
        pi = [math.exp(d.logps[d.chosen]) for d in first]
        q_all = inclusion_probabilities([math.exp(x) for x in first[0].logps], len(copies))
        seen: dict[int, list[float]] = {}
        for d, s in zip(first, copies):
            seen.setdefault(d.chosen, []).append(s.reward)
        q_hat = {a: sum(r) / len(r) for a, r in seen.items()}
        p_of = {d.chosen: p for d, p in zip(first, pi)}
        baseline = sum(p_of[a] * q_hat[a] for a in seen) / sum(p_of[a] for a in seen)
        if natural:
            baseline = sum(q_hat.values()) / len(q_hat)
        for d, s in zip(first, copies):
            a = d.chosen
            weight = 1.0 if natural else p_of[a] / q_all[a]
            s.advantage = weight * (q_hat[a] - baseline) / len(seen[a])
            s.later_advantage = q_hat[a] - baseline
