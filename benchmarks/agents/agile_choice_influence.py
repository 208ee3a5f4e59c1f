"""How one kind's PPO gradient moves the other kind's ``[SeekAdvice]``: the update split by question phrasing.

At c = 0.6 PPO's rollouts pay 0.63 for answering a yes/no-phrased question and 0.40 for asking, yet its P(ask) on
those questions rises (``agile_ppo_costs.py``; ``agile_choice_diagnosis.py``: the LoRA learns one shift of the ask
logit, the same on both kinds). This script takes one PPO iteration's rollouts from the starting policy and splits
its loss gradient into the yes/no-phrased sessions' part and the others' part, then steps the LoRA weights along
each part alone (a fixed length, the whole gradient's direction scaled) and reads the mean P(ask) of both kinds'
choices again: the 2 x 2 table of what each kind's sessions do to each kind. Done for ``distinct`` and ``natural``
advantages on the same rollouts, and for Adam's first step (the sign of the whole gradient). The settings (groups,
cost, LoRA, episodes an iteration, seed) are a PPO run's, read from its checkpoint; the weights are the starting
policy's (the LoRA at its initialisation)::

    python benchmarks/agents/agile_choice_influence.py --run runs/ppo-costs/long24/c0.6-distinct
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile import functions as fn  # noqa: E402


def rollouts(model, tokenizer, cfg, seed: int):
    """One iteration's sessions (K copies, distinct first draws) from ``model``: ``ChoiceSample``s."""
    from agile.executor.memory import Embedder
    from agile.executor.policy import LLMPolicy
    from agile.train.choices import ChoiceSample, DecisionTracker
    from agile.train.ppo import collect, proxy_bonus, rollout_setting, sample_episodes

    groups, dbs, exec_cfg = rollout_setting(cfg)
    policy = LLMPolicy(model.lm, tokenizer, cfg.max_new_tokens, greedy=False, batch_size=8,
                       decoding="constrained", seed=seed)
    episodes = sample_episodes(groups, cfg.questions_per_episode, cfg.episodes_per_iteration, random.Random(seed))
    records, tasks, decisions = collect(DecisionTracker(policy), episodes, tokenizer, Embedder(), exec_cfg,
                                        cfg.rollouts_per_task, dbs, tag="influence", spread=True)
    return [ChoiceSample(d, r.reward + proxy_bonus(r, cfg.proxy_beta), t)
            for r, d, t in zip(records, decisions, tasks) if d]


def kind_gradients(model, samples, params) -> dict[bool, list[torch.Tensor]]:
    """The policy loss's gradient (``-advantage * log pi(chosen)``, averaged over every decision) from the yes/no-
    phrased sessions (True) and from the others (False)."""
    from agile.train.choices import choice_log_probs

    count = sum(len(s.decisions) for s in samples)
    out = {}
    for kind in (True, False):
        for p in params:
            p.grad = None
        for s in samples:
            for j, d in enumerate(s.decisions):
                if d.yes_no is not kind:
                    continue
                advantage = s.advantage if j == 0 or s.later_advantage is None else s.later_advantage
                (-advantage * choice_log_probs(model.lm, d.prompt, d.candidates)[d.chosen] / count).backward()
        out[kind] = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    return out


def ask_by_kind(model, firsts) -> dict[bool, float]:
    from agile.train.choices import choice_log_probs

    probs: dict[bool, list[float]] = {True: [], False: []}
    with torch.no_grad():
        for d in firsts:
            lp = choice_log_probs(model.lm, d.prompt, d.candidates)
            probs[d.yes_no].append(float(lp[d.functions.index(fn.SEEK_ADVICE)].exp()))
    return {k: sum(v) / len(v) for k, v in probs.items() if v}


def stepped(params, direction: list[torch.Tensor], length: float):
    """A context that moves ``params`` by ``-length * direction`` and puts them back."""
    import contextlib

    @contextlib.contextmanager
    def _ctx():
        with torch.no_grad():
            for p, g in zip(params, direction):
                p.sub_(length * g)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, g in zip(params, direction):
                    p.add_(length * g)
    return _ctx()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a PPO run folder (constrained, with a checkpoint): its settings")
    p.add_argument("--step", type=float, default=0.02,
                   help="the step's length in the LoRA weights (the whole gradient's direction, scaled)")
    p.add_argument("--adam-lr", type=float, default=1e-3, help="Adam's first step: this lr times the sign")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from agile.models import load_causal_lm
    from agile.train.choices import choice_advantages
    from agile.train.ppo import PPOConfig, build_policy

    cfg = PPOConfig(**json.loads((Path(args.run) / "checkpoint-p0.json").read_text())["config"])
    lm, tokenizer = load_causal_lm(cfg.model, device="cpu", seed=cfg.seed)
    model, _ = build_policy(lm, cfg)
    model.eval()
    params = [q for q in model.parameters() if q.requires_grad]
    samples = rollouts(model, tokenizer, cfg, cfg.seed)
    firsts = [s.decisions[0] for s in samples if fn.SEEK_ADVICE in s.decisions[0].functions]
    base = ask_by_kind(model, firsts)
    print(f"{len(samples)} sessions; first choices with [SeekAdvice]: {sum(d.yes_no for d in firsts)} yes/no-phrased, "
          f"{sum(not d.yes_no for d in firsts)} others; P(ask) yes/no {base[True]:.4f}, others {base[False]:.4f}")
    print("\n| advantages | step along | its share of the gradient's norm | ΔP(ask) yes/no-phrased | ΔP(ask) others |")
    print("|---|---|---|---|---|")
    for estimator in ("distinct", "natural"):
        choice_advantages(samples, estimator)
        grads = kind_gradients(model, samples, params)
        whole = [a + b for a, b in zip(grads[True], grads[False])]
        norm = math.sqrt(sum(float((g * g).sum()) for g in whole))
        for name, direction in (("yes/no-phrased sessions' part", grads[True]), ("the others' part", grads[False]),
                                ("whole gradient", whole)):
            share = math.sqrt(sum(float((g * g).sum()) for g in direction)) / norm
            with stepped(params, [g / norm for g in direction], args.step):
                moved = ask_by_kind(model, firsts)
            print(f"| {estimator} | {name} | {share:.2f} | {moved[True] - base[True]:+.4f} | "
                  f"{moved[False] - base[False]:+.4f} |", flush=True)
        with stepped(params, [torch.sign(g) for g in whole], args.adam_lr):
            moved = ask_by_kind(model, firsts)
        print(f"| {estimator} | Adam's first step (lr x sign of the whole) | – | {moved[True] - base[True]:+.4f} | "
              f"{moved[False] - base[False]:+.4f} |", flush=True)


if __name__ == "__main__":
    main()
