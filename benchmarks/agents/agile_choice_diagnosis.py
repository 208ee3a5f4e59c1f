"""Why PPO at c = 0.6 asks on yes/no-phrased questions it should answer: what its LoRA learned, per kind.

``agile_ppo_costs.py`` runs at c = 0.6 end with P(ask) about 0.8 on both kinds, although the rollouts pay 0.63
for answering a yes/no-phrased question and 0.40 for asking. This script measures, on first choices the
reference policy (the untrained agent, constrained, sampling) meets on the PPO runs' training groups:

1. **What PPO changed, per kind.** Each checkpoint's log-odds of ``[SeekAdvice]`` against ``[PredictAnswer]``
   minus the reference's, on the same prompts: the same shift on both kinds means the update learned nothing
   kind-specific; and the share of the change in P(ask) that the kind-blind shift explains (the allowed sets
   differ: two functions for a yes/no-phrased question, three for the others, so a shared shift moves the two
   kinds' P(ask) by different amounts).
2. **Is the kind there to learn?** A logistic probe of the choice state (the last prompt token's hidden state,
   at several layers) for the phrasing, scored out of fold by product group.
3. **The best kind-blind shift.** The expected reward, at the rollouts' own mean rewards per kind and function, of
   the reference with one shift of ``[SeekAdvice]``'s logit on every prompt (the direction a LoRA update moves
   most easily when it does not tell kinds apart), against the policy that answers yes/no-phrased questions and
   asks on the others: where PPO's P(ask) sits if it learns only the shared shift.
   ``--probe-only``: the probe alone, beside the same probe with the question restated right before the choice.
4. **Would a head on the choice state learn it, and with which step?** A linear head on the last layer's choice
   state shifting ``[SeekAdvice]``'s logit over the reference's, trained with Adam on half the groups (rollout
   rewards per kind and function, KL to the reference as in PPO) and read on the other half: bias only
   (kind-blind), raw states, standardised states; the vanilla expected-reward gradient (what ``distinct``
   estimates) against the natural one (each function pushed by its advantage).

::

    python benchmarks/agents/agile_choice_diagnosis.py --runs runs/ppo-costs/long24/c0.6-distinct \
        runs/ppo-costs/fullbatch/c0.6-distinct --episodes 32
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agile import functions as fn  # noqa: E402
from agile.executor.executor import QUESTION_AGAIN  # noqa: E402

ASK, ANSWER, SEARCH = fn.SEEK_ADVICE, fn.PREDICT_ANSWER, fn.SEARCH_PRODUCT


def run_config(run: Path):
    from agile.train.ppo import PPOConfig

    saved = json.loads((run / "checkpoint-p0.json").read_text())["config"]
    return PPOConfig(**saved)


def load_trained(model, run: Path) -> None:
    """The checkpoint's trainable weights into ``model`` (the LoRA of ``build_policy``)."""
    from safetensors.torch import load_file

    params = dict(model.named_parameters())
    with torch.no_grad():
        for key, value in load_file(run / "checkpoint-p0.safetensors").items():
            if key.startswith("weight/"):
                params[key.removeprefix("weight/")].copy_(value)


def first_choices(model, tokenizer, cfg, n_episodes: int, seed: int) -> list[dict]:
    """Each session's first function choice, sampled by ``model``'s constrained policy over ``cfg.groups``."""
    from agile.executor.memory import Embedder
    from agile.executor.policy import LLMPolicy
    from agile.train.choices import DecisionTracker
    from agile.train.ppo import collect, rollout_setting, sample_episodes

    groups, dbs, exec_cfg = rollout_setting(cfg)
    policy = LLMPolicy(model.lm, tokenizer, cfg.max_new_tokens, greedy=False, batch_size=8,
                       decoding="constrained", seed=seed)
    episodes = sample_episodes(groups, cfg.questions_per_episode, n_episodes, random.Random(seed))
    records, _, decisions = collect(DecisionTracker(policy), episodes, tokenizer, Embedder(), exec_cfg, 1, dbs,
                                    tag="diagnosis")
    return [{"decision": d[0], "group": r.group} for r, d in zip(records, decisions)
            if d and ASK in d[0].functions and ANSWER in d[0].functions]


def log_probs(model, choices: list[dict]) -> list[dict[str, float]]:
    from agile.train.choices import choice_log_probs

    out = []
    with torch.no_grad():
        for c in choices:
            d = c["decision"]
            out.append(dict(zip(d.functions, choice_log_probs(model.lm, d.prompt, d.candidates).tolist())))
    return out


def question_last(prompt: list[int], tokenizer) -> list[int]:
    """``prompt`` with its question restated at the end (``Question: ...``): the choice made right after it."""
    question = fn.current_question(tokenizer.decode(prompt))
    return prompt + tokenizer(f"{QUESTION_AGAIN} {question}\n", add_special_tokens=False).input_ids


def choice_states(model, choices: list[dict], layers: list[int], tokenizer=None) -> dict[int, np.ndarray]:
    """The last prompt token's hidden state at each of ``layers`` (the reference: adapters off); with ``tokenizer``,
    of the prompt with its question restated at the end (``question_last``)."""
    lm = model.lm
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    out = {layer: [] for layer in layers}
    with torch.no_grad(), lm.disable_adapter():
        for c in choices:
            prompt = c["decision"].prompt if tokenizer is None else question_last(c["decision"].prompt, tokenizer)
            hidden = base(input_ids=torch.tensor([prompt]), output_hidden_states=True,
                          logits_to_keep=1).hidden_states
            for layer in layers:
                out[layer].append(hidden[layer][0, -1].float().numpy())
    return {layer: np.stack(v) for layer, v in out.items()}


def probe(states: np.ndarray, kinds: np.ndarray, groups: list[str], folds: int = 4) -> float:
    """Out-of-fold accuracy (by group) of a logistic probe for the phrasing."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    right = 0
    for train, test in GroupKFold(n_splits=min(folds, len(set(groups)))).split(states, kinds, groups):
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
        clf.fit(states[train], kinds[train])
        right += int((clf.predict(states[test]) == kinds[test]).sum())
    return right / len(kinds)


def rollout_rewards(runs: list[Path]) -> dict[tuple[bool, str], float]:
    """Mean session reward per (yes/no-phrased, first function) over the runs' rollouts."""
    sums: dict[tuple[bool, str], list[float]] = defaultdict(list)
    for run in runs:
        for line in (run / "rollouts.jsonl").read_text().splitlines():
            r = json.loads(line) if line else {}
            first = [f for f in r.get("functions", []) if f in (ASK, ANSWER, SEARCH)]
            if "yes_no" in r and first:
                sums[(r["yes_no"], first[0])].append(r["reward"])
    return {k: sum(v) / len(v) for k, v in sums.items()}


def ask_prob(lp: dict[str, float]) -> float:
    return math.exp(lp[ASK])


def shifted_value(reference: list[dict[str, float]], kinds: np.ndarray, rewards, shift: float) -> float:
    """Mean expected reward of the reference with ``shift`` added to every prompt's ``[SeekAdvice]`` logit."""
    total = 0.0
    for lp, kind in zip(reference, kinds):
        logits = {f: v + (shift if f == ASK else 0.0) for f, v in lp.items()}
        norm = math.log(sum(math.exp(v) for v in logits.values()))
        total += sum(math.exp(v - norm) * rewards[(bool(kind), f)] for f, v in logits.items())
    return total / len(reference)


def best_shift(reference, kinds, rewards) -> tuple[float, float]:
    """The kind-blind shift of the ask logit (a grid over [-4, 4]) with the highest expected reward."""
    return max(((float(s), shifted_value(reference, kinds, rewards, s)) for s in np.linspace(-4, 4, 161)),
               key=lambda x: x[1])


def head_bandit(states: np.ndarray, reference, kinds: np.ndarray, groups: list[str], rewards, features: str,
                lr: float, steps: int, kl_coef: float, step_rule: str = "vanilla") -> list[dict[str, float]]:
    """Train ``[SeekAdvice]``'s logit ``ref log pi + w x + b`` on the even-numbered groups' prompts; per step, mean P(ask) by kind
    on the odd-numbered (held-out) groups. ``features``: ``bias`` (W = 0), ``raw`` or ``standardised`` (by the
    training prompts' mean and sd). ``step_rule``: ``vanilla``, the exact gradient of the expected reward
    (sum_f pi(f) (R(f) - b) grad log pi(f), what ``distinct`` estimates), or ``natural``, each function's
    log-probability pushed by its advantage R(f) - mean R over the allowed ones (sum_f (R(f) - mean) grad log
    pi(f): the natural gradient in a softmax's logits, which does not vanish as pi saturates)."""
    names = sorted(set(groups))
    train = np.array([names.index(g) % 2 == 0 for g in groups])
    x = torch.tensor(states, dtype=torch.float32)
    if features == "standardised":
        mean, sd = x[train].mean(0), x[train].std(0) + 1e-6
        x = (x - mean) / sd
    functions = [ASK, ANSWER, SEARCH]
    ref = torch.full((len(reference), 3), -1e4)  # a disallowed function: no mass, and finite gradients
    reward = torch.zeros(len(reference), 3)
    for i, (lp, kind) in enumerate(zip(reference, kinds)):
        for j, f in enumerate(functions):
            if f in lp:
                ref[i, j], reward[i, j] = lp[f], rewards[(bool(kind), f)]
    # One row: a shift of [SeekAdvice]'s logit against the others (per-coordinate Adam on one bias per function
    # would move two rising logits at the same rate, whatever their gradients).
    weight = torch.zeros(x.shape[1], requires_grad=features != "bias")
    bias = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.Adam([bias] + ([weight] if features != "bias" else []), lr=lr)
    ask_only = torch.tensor([1.0, 0.0, 0.0])
    curve = []
    for step in range(steps + 1):
        logits = ref + ((x @ weight) + bias)[:, None] * ask_only
        logp = torch.log_softmax(logits, -1)
        pi = logp.exp()
        with torch.no_grad():
            row = {"step": step}
            for split, mask in (("train", train), ("held_out", ~train)):
                for name, kind in (("yes_no", True), ("other", False)):
                    rows = torch.tensor(mask & (kinds == kind))
                    row[f"{split}_{name}"] = float(pi[rows, 0].mean())
                row[f"{split}_value"] = float((pi[torch.tensor(mask)] * reward[torch.tensor(mask)]).sum(-1).mean())
            curve.append(row)
        if step == steps:
            break
        allowed = ref > -1e3
        kl = (pi * (logp - ref)).sum(-1)
        if step_rule == "natural":
            advantage = torch.where(allowed, reward - (reward * allowed).sum(-1, keepdim=True)
                                    / allowed.sum(-1, keepdim=True), torch.zeros_like(reward))
            gain = (advantage * torch.where(allowed, logp, torch.zeros_like(logp))).sum(-1)
        else:
            gain = (pi * reward).sum(-1)
        loss = (-gain + kl_coef * kl)[torch.tensor(train)].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return curve


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="PPO run folders (constrained, with a checkpoint)")
    p.add_argument("--episodes", type=int, default=32, help="episodes of first choices to collect")
    p.add_argument("--layers", default="8,16,22,30", help="hidden-state layers the probe reads")
    p.add_argument("--seed", type=int, default=12345, help="draws apart from the runs' own")
    p.add_argument("--head-steps", type=int, default=100, help="Adam steps of the head in section 4")
    p.add_argument("--probe-only", action="store_true",
                   help="only the probe, on the prompts as the agent sees them and with the question restated last")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="", help="JSON of the figures (optional)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from agile.models import load_causal_lm
    from agile.train.ppo import build_policy

    runs = [Path(r) for r in args.runs]
    cfg = run_config(runs[0])
    lm, tokenizer = load_causal_lm(cfg.model, device="cpu", seed=cfg.seed)
    model, _ = build_policy(lm, cfg)
    model.eval()
    choices = first_choices(model, tokenizer, cfg, args.episodes, args.seed)
    kinds = np.array([c["decision"].yes_no for c in choices])
    groups = [c["group"] for c in choices]
    print(f"{len(choices)} first choices with [SeekAdvice] and [PredictAnswer] allowed: {int(kinds.sum())} "
          f"yes/no-phrased, {int((~kinds).sum())} others, {len(set(groups))} groups", flush=True)
    layers = [int(x) for x in args.layers.split(",")]
    states = choice_states(model, choices, layers)
    if args.probe_only:
        print("\n## Probe of the choice state for the phrasing (out of fold by group, 4 folds)\n")
        print(f"majority class: {max(kinds.mean(), 1 - kinds.mean()):.3f}")
        restated = choice_states(model, choices, layers, tokenizer)
        for layer in layers:
            print(f"layer {layer}: as the agent sees it {probe(states[layer], kinds, groups):.3f}; question restated "
                  f"at the end {probe(restated[layer], kinds, groups):.3f}", flush=True)
        return
    reference = log_probs(model, choices)
    figures: dict = {"choices": len(choices), "yes_no": int(kinds.sum())}

    print("\n## 1. What PPO changed, per kind (same prompts; log-odds ask vs answer, minus the reference's)\n")
    print("| policy | kind | P(ask) | shift of log-odds ask:answer, mean [sd] | P(ask) from the kind-blind shift |")
    print("|---|---|---|---|---|")
    for run in [None, *runs]:
        if run is not None:
            load_trained(model, run)
        lps = reference if run is None else log_probs(model, choices)
        shifts = np.array([(lp[ASK] - lp[ANSWER]) - (rf[ASK] - rf[ANSWER]) for lp, rf in zip(lps, reference)])
        shared = float(shifts.mean())
        for name, mask in (("yes/no-phrased", kinds), ("others", ~kinds)):
            idx = np.flatnonzero(mask)
            p_ask = float(np.mean([ask_prob(lps[i]) for i in idx]))
            # The reference with the one shared shift added to the ask logit (against answer and search alike).
            blind = float(np.mean([1 / (1 + sum(math.exp(reference[i][f] - reference[i][ASK] - shared)
                                                   for f in reference[i] if f != ASK)) for i in idx]))
            print(f"| {'reference' if run is None else run.parent.name} | {name} | {p_ask:.3f} | "
                  f"{shifts[idx].mean():+.2f} [{shifts[idx].std():.2f}] | {blind:.3f} |")
            figures[f"{'reference' if run is None else run.parent.name}/{name}"] = {
                "ask_prob": p_ask, "shift_mean": float(shifts[idx].mean()), "shift_sd": float(shifts[idx].std()),
                "kind_blind_ask_prob": blind}

    print("\n## 2. Probe of the choice state for the phrasing (out of fold by group, 4 folds)\n")
    print(f"majority class: {max(kinds.mean(), 1 - kinds.mean()):.3f}")
    for layer in layers:
        acc = probe(states[layer], kinds, groups)
        figures[f"probe_layer_{layer}"] = acc
        print(f"layer {layer}: {acc:.3f}")

    rewards = rollout_rewards(runs)
    shift, value = best_shift(reference, kinds, rewards)
    split_value = float(np.mean([rewards[(True, ANSWER)] if k else rewards[(False, ASK)] for k in kinds]))
    print("\n## 3. The rollouts' mean reward per kind and first function, and the best kind-blind shift\n")
    for (yes_no, f), r in sorted(rewards.items()):
        print(f"{'yes/no-phrased' if yes_no else 'others'} {f}: {r:.3f}")
    print(f"\nreference: {shifted_value(reference, kinds, rewards, 0.0):.3f}; best shared shift of the ask logit "
          f"{shift:+.2f}: {value:.3f}; answer yes/no-phrased, ask on the others: {split_value:.3f}")
    figures.update(rewards={f"{k[0]}/{k[1]}": v for k, v in rewards.items()}, best_shift=[shift, value],
                   split_value=split_value)

    print("\n## 4. A linear head on the last layer's choice state, exact gradient (train: even groups, read: odd)\n")
    print("| step rule | features | lr | step | P(ask) yes/no / others, held-out groups | expected reward held-out |")
    print("|---|---|---|---|---|---|")
    for rule in ("vanilla", "natural"):
        for features, lr in (("bias", 1e-2), ("raw", 1e-3), ("standardised", 1e-2)):
            curve = head_bandit(states[layers[-1]], reference, kinds, groups, rewards, features, lr, args.head_steps,
                                cfg.kl_coef, rule)
            figures[f"head/{rule}/{features}/{lr:g}"] = curve
            for row in curve:
                if row["step"] in (0, 5, 10, 20, 50, args.head_steps):
                    print(f"| {rule} | {features} | {lr:g} | {row['step']} | {row['held_out_yes_no']:.3f} / "
                          f"{row['held_out_other']:.3f} | {row['held_out_value']:.3f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1))
        np.savez(Path(args.out).with_suffix(".npz"), kinds=kinds, groups=np.array(groups),
                 reference=np.array([[lp.get(f, -np.inf) for f in (ASK, ANSWER, SEARCH)] for lp in reference]),
                 **{f"states_{layer}": states[layer] for layer in layers})


if __name__ == "__main__":
    main()
