"""Does PPO learn whom to ask about? Its advice per cost c, split by how the question is phrased.

The embedded SmolLM2 agent with constrained decoding (no SFT) is right on about 0.66 of yes/no questions and
0.08 of searches when it answers itself, so for c in about (0.35, 0.9) the best simple policy asks on searches and
answers yes/no questions itself. For each c this trains PPO on the training groups (those ``agile_productqa.py
--held-out-train 4`` trains on) and prints, per iteration, the policy's probability of ``[SeekAdvice]`` at each
session's first choice and the share of sessions where it is the most probable function (what the greedy agent
does), for yes/no-phrased questions and the others (``agile.envs.phrasing``, what the agent sees). After the
cost runs, a table per c: iterations taken, those numbers averaged over the last ``--tail`` iterations, and the
same by the dataset's question type (an annotation, read here for analysis only, never by the agent).
Each run's ``ppo_curve.png`` and ``ppo_history.json`` are in ``--out/c<c>-<estimator>/``; a finished run is read
back, not trained again::

    python benchmarks/agents/agile_ppo_costs.py --out runs/ppo-costs --costs 0.5 --estimator loop
    python benchmarks/agents/agile_ppo_costs.py --out runs/ppo-costs --costs 0.4,0.5,0.6,0.7,0.8 --estimator distinct
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile.envs.productqa import default_productqa_root, held_out_train_split  # noqa: E402
from agile.train.ppo import PPOConfig, train  # noqa: E402


def run_folder(args, c: float) -> Path:
    if args.runs_from:  # the cost runs of agile_productqa.py --stages cost (the join's PPO agents)
        return Path(args.runs_from) / f"ppo_c{c:g}"
    return Path(args.out) / f"c{c:g}-{args.estimator}{'-head' if args.choice_head else ''}"


def run_cost(args, c: float) -> dict:
    out = run_folder(args, c)
    done = out / "ppo_history.json"
    if done.is_file():
        print(f"read back {done}", flush=True)
        return json.loads(done.read_text())
    if args.runs_from:
        raise SystemExit(f"{done} is missing: train it with agile_productqa.py --out {args.runs_from} --stages cost "
                         f"--costs {c:g}, or drop --runs-from")
    trained_on, _ = held_out_train_split(default_productqa_root(), args.held_out_train)
    cfg = PPOConfig(model=args.model, groups=trained_on, decoding="constrained",
                    estimator=args.estimator, rollouts_per_task=args.rollouts, advice_cost=c,
                    questions_per_episode=args.questions, episodes_per_iteration=args.episodes,
                    iterations=args.iterations, stop_when_flat=args.stop_flat, lr=args.lr, kl_coef=args.kl,
                    proxy_beta=args.beta, lora_layers=args.lora_layers, update_epochs=args.epochs,
                    minibatch_size=args.minibatch, micro_batch_size=2, max_new_tokens=args.max_new_tokens,
                    rollout_batch_size=8, restate_question=args.restate_question, seed=args.seed,
                    choice_head=args.choice_head, freeze_lm=args.freeze_lm, head_lr=args.head_lr,
                    head_components=args.head_components,
                    device="cpu", cpu_threads=args.threads,
                    out=str(out), save=False)
    start = time.perf_counter()
    result = train(cfg, log=lambda m: print(f"[{time.strftime('%H:%M:%S')}] c={c:g} {m}", flush=True))
    print(f"c={c:g}: {len(result['history'])} iterations in {time.perf_counter() - start:.0f}s", flush=True)
    return json.loads(done.read_text())


def by_type(out: Path, tail: int, iterations: int) -> dict[str, tuple[float, float, int]]:
    """Mean P(ask) and greedy-ask share of the last ``tail`` iterations' sessions, per question type and phrasing."""
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines() if line]
    last = {f"it{i}-" for i in range(max(iterations - tail, 0), iterations)}
    rows = [r for r in rows if "ask_prob" in r and any(r["episode_id"].startswith(t) for t in last)]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["qtype"], []).append(r)
        groups.setdefault("yes/no-phrased" if r["yes_no"] else "not yes/no-phrased", []).append(r)
    return {k: (sum(r["ask_prob"] for r in v) / len(v), sum(r["greedy_ask"] for r in v) / len(v), len(v))
            for k, v in groups.items()}


@functools.cache
def question_texts() -> dict[tuple[str, str], str]:
    """(group, question id) -> the question, every split of the data (read once: a join reads many folders)."""
    from agile.envs.productqa import load_split

    root = default_productqa_root()
    return {(g.name, q.id): q.question for split in ("train", "test") for g in load_split(root, split)
            for q in g.questions}


def unseen_advice(eval_dir: Path) -> dict[str, tuple[float, int]]:
    """The greedy PPO agent's advice rate on the groups no training saw (its ``agile eval`` at c, from
    ``agile_productqa.py --stages cost``), by phrasing, and its accuracy and total there."""
    from agile.envs.phrasing import is_yes_no_question

    text = question_texts()
    rows = [json.loads(line) for line in (eval_dir / "sessions.jsonl").read_text().splitlines() if line]
    out = {}
    for name, want in (("yes/no-phrased", True), ("not yes/no-phrased", False)):
        kind = [r for r in rows if is_yes_no_question(text[(r["group"], r["question_id"])]) is want]
        out[name] = (sum(r["advised"] for r in kind) / len(kind) if kind else float("nan"), len(kind))
        alone = [r["correct"] for r in kind if not r["advised"]]
        out[f"right alone, {name}"] = (sum(alone) / len(alone) if alone else float("nan"), len(alone))
    out["accuracy"] = (sum(r["correct"] for r in rows) / len(rows), len(rows))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/ppo-costs")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--costs", default="0.4,0.5,0.6,0.7,0.8")
    p.add_argument("--estimator", default="distinct", choices=["loop", "grpo", "distinct", "natural"])
    p.add_argument("--rollouts", type=int, default=2, help="copies of every session (K)")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--episodes", type=int, default=2, help="episodes per iteration")
    p.add_argument("--questions", type=int, default=4, help="sessions per episode")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--kl", type=float, default=0.05, help="KL coefficient to the reference")
    p.add_argument("--beta", type=float, default=0.1, help="AGILE's proxy bonus for reusable advice")
    p.add_argument("--lora-layers", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--minibatch", type=int, default=8)
    p.add_argument("--stop-flat", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--held-out-train", type=int, default=4)
    p.add_argument("--tail", type=int, default=2, help="iterations averaged in the summary")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--restate-question", action="store_true",
                   help="the executor states the question again right before the choice (ExecutorConfig.restate_question)")
    p.add_argument("--choice-head", action="store_true",
                   help="a linear head on the choice state moves [SeekAdvice]'s score (PPOConfig.choice_head)")
    p.add_argument("--freeze-lm", action="store_true", help="with --choice-head: train the head alone, no LoRA")
    p.add_argument("--head-lr", type=float, default=1e-2, help="the choice head's learning rate")
    p.add_argument("--head-components", type=int, default=0,
                   help="the head reads this many principal components of the choice state (0: all of it)")
    p.add_argument("--runs-from", default="",
                   help="read the PPO runs of agile_productqa.py --out DIR --stages cost (DIR/ppo_c<c>) instead of "
                        "training; the tables and advice_by_cost.png go to --out")
    args = p.parse_args()
    if args.freeze_lm and not args.choice_head:
        p.error("--freeze-lm trains the choice head alone: add --choice-head")
    torch.set_num_threads(args.threads)
    costs = [float(x) for x in args.costs.split(",")]
    results = {c: run_cost(args, c) for c in costs}

    print(f"\n## PPO's advice by phrasing ({args.estimator}, K = {args.rollouts}, lr {args.lr:g}, "
          f"{args.episodes} x {args.questions} sessions an iteration)\n")
    print("| c | iteration | P(ask) yes/no | P(ask) other | greedy asks yes/no | greedy asks other | "
          "rollout advice rate | human calls |")
    print("|---|---|---|---|---|---|---|---|")
    for c, result in results.items():
        for r in result["history"]:
            print(f"| {c:g} | {r['iteration']} | {r.get('ask_prob_yes_no', float('nan')):.3f} | "
                  f"{r.get('ask_prob_other', float('nan')):.3f} | {r.get('greedy_ask_yes_no', float('nan')):.3f} | "
                  f"{r.get('greedy_ask_other', float('nan')):.3f} | {r['advice_rate']:.3f} | {r['human_calls']} |")
    print(f"\n## Last {args.tail} iterations per c (question type read for analysis only)\n")
    kinds = ("yes/no-phrased", "not yes/no-phrased", "search_qa", "fact_qa", "reasoning_qa")
    print("| c | iterations | training human calls | " + " | ".join(f"P(ask) / greedy {k}" for k in kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    for c, result in results.items():
        n = len(result["history"])
        shares = by_type(run_folder(args, c), args.tail, n)
        cells = [f"{shares[k][0]:.2f} / {shares[k][1]:.2f} (n={shares[k][2]})" if k in shares else "-" for k in kinds]
        print(f"| {c:g} | {n} | {result['training_human_calls']} | " + " | ".join(cells) + " |")
    if args.runs_from:
        print("\n## The greedy PPO agent on the groups no training saw (its own advice, agile eval at c)\n")
        print("| c | advice rate yes/no-phrased | advice rate others | right alone yes/no-phrased | right alone others | "
              "accuracy | total score |\n|---|---|---|---|---|---|---|")
        columns = ("yes/no-phrased", "not yes/no-phrased", "right alone, yes/no-phrased",
                   "right alone, not yes/no-phrased")
        # agile_join.py's "agent, own advice" row first: the untrained agent (its text prices advice at 0.3).
        runs = [("untrained", None, Path(args.runs_from) / "join" / "eval_SFT")]
        runs += [(f"{c:g}", c, Path(args.runs_from) / f"eval_PPO c={c:g}") for c in costs]
        for label, c, eval_dir in runs:
            if not (eval_dir / "sessions.jsonl").is_file():
                continue
            seen = unseen_advice(eval_dir)
            advised = sum(seen[k][0] * seen[k][1] for k in columns[:2]) / seen["accuracy"][1]
            total = "" if c is None else f"{seen['accuracy'][0] - c * advised:.3f}"
            print(f"| {label} | " + " | ".join(f"{seen[k][0]:.2f} (n={seen[k][1]})" for k in columns)
                  + f" | {seen['accuracy'][0]:.3f} | {total} |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plot_costs(results, Path(args.out), args)
    acc = own_accuracy([run_folder(args, c) for c in costs])
    print("\nRight when answering itself (sessions that did not ask, all iterations of these runs): " +
          "; ".join(f"{k} {acc[k][0]:.2f} (n={acc[k][1]})" for k in kinds if k in acc) +
          (f"; yes/no-phrased answered yes {acc['answered yes'][0]:.2f}" if "answered yes" in acc else ""))


def plot_costs(results: dict, out: Path, args) -> None:
    """P(ask) at the first choice per c, yes/no-phrased and not, averaged over the last ``--tail`` iterations
    (AGILE's advice-rate-against-cost figure, split the way the cost should split it): ``advice_by_cost.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    costs = sorted(results)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key, label in (("ask_prob_yes_no", "yes/no-phrased"), ("ask_prob_other", "not yes/no-phrased"),
                       ("ask_prob", "all")):
        ys = []
        for c in costs:
            rows = [r[key] for r in results[c]["history"][-args.tail:] if key in r]
            ys.append(sum(rows) / len(rows) if rows else float("nan"))
        ax.plot(costs, ys, marker="o", label=label)
    ax.set_xlabel("advice cost c")
    ax.set_ylabel("P([SeekAdvice]) at the first choice")
    ax.set_title(f"PPO ({args.estimator}), last {args.tail} iterations")
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "advice_by_cost.png", dpi=120)
    plt.close(fig)


def own_accuracy(folders: list[Path]) -> dict[str, tuple[float, int]]:
    """How often the agent was right in the sessions where it did not ask (every iteration of every run given),
    by phrasing and by question type: asking pays at cost c where this is below 1 - c."""
    groups: dict[str, list[bool]] = {}
    for folder in folders:
        for line in (folder / "rollouts.jsonl").read_text().splitlines():
            r = json.loads(line) if line else {}
            if not r or r["advised"] or "yes_no" not in r:
                continue
            groups.setdefault("yes/no-phrased" if r["yes_no"] else "not yes/no-phrased", []).append(r["correct"])
            groups.setdefault(r["qtype"], []).append(r["correct"])
            if r["yes_no"]:  # the constrained agent's yes/no answer is mostly one word, set by the context's form
                groups.setdefault("answered yes", []).append(str(r["answer"]).strip().lower() == "yes")
    return {k: (sum(v) / len(v), len(v)) for k, v in groups.items()}


if __name__ == "__main__":
    main()
