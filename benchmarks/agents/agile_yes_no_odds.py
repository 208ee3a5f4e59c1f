"""How much the embedded agent's yes/no answers know: its log-odds of "yes" against "no", by context.

With the question restated the constrained agent answers nearly every yes/no-phrased question "no" once the
system text lists ``[SeekAdvice]`` (PPO's context, and every gate's with ``list_advice_with_gate``), and is right
on a fifth of them on the groups no training saw: there is then little for a verifier to target. A one-word
answer can still carry a graded belief. This records, for every yes/no-phrased question the agent answers itself,
its log-probability of the "yes" line minus the "no" line (the constrained decoder's two candidate lines), in two
contexts: advice listed but never taken (``ask_shift`` far below, so every question is answered) and advice not
offered (the ``no_advice`` ablation). Per context it prints, on the training groups and on the evaluated ones:
the share answered yes, accuracy, the AUROC of the log-odds for a gold "yes" (does the belief rank the answers?),
and the accuracy of the answer recentred at the median log-odds of the *training* groups' questions (no gold read
to set it), with the AUROC of the recentred |log-odds| for being right (would confidence find the mistakes?).
The gold answer is read to score, never by the agent::

    python benchmarks/agents/agile_yes_no_odds.py --questions 8 --test-questions 10 --out runs/yes-no-odds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile import functions as fn  # noqa: E402
from agile.envs.phrasing import is_yes_no_question  # noqa: E402
from agile.envs.productqa import default_productqa_root, held_out_train_split, list_groups, load_split  # noqa: E402
from agile.executor.executor import Executor, ExecutorConfig  # noqa: E402
from agile.executor.memory import Embedder, Memory  # noqa: E402
from agile.executor.policy import LLMPolicy, run_executors  # noqa: E402
from agile.models import load_causal_lm  # noqa: E402
from prm.training.quality import auroc  # noqa: E402

CONTEXTS = {"advice listed, never taken": {"use_advice": True}, "advice not offered": {"use_advice": False}}
NEVER_ASK = -1e4
"""Added to [SeekAdvice]'s score: listed in the system text, never chosen."""


class OddsRecorder:
    """Wraps the constrained policy: after each round, the yes-minus-no log-odds of every yes/no answer it gave,
    keyed by (episode, session index)."""

    def __init__(self, policy: LLMPolicy):
        self.policy, self.odds = policy, {}

    def __call__(self, executors):
        before = len(self.policy.constrained.choices)
        turns = self.policy(executors)
        choices = self.policy.constrained.choices[before:]
        if len(choices) == len(executors):  # one choice per executor, in order (no turn failed)
            for e, c in zip(executors, choices):
                if c.get("function") == fn.PREDICT_ANSWER and c.get("yes_no_question"):
                    sign = 1.0 if c["turn"].strip().lower().endswith("yes") else -1.0
                    self.odds[(e.episode_id, len(e.records))] = sign * c["signals"]["answer_margin"]
        return turns


def gold_yes(question) -> bool | None:
    gold = str(question.short_answer).strip().lower()
    return True if gold.startswith("yes") else False if gold.startswith("no") else None


def play(model, tokenizer, groups, questions: int, exec_cfg: ExecutorConfig, embedder) -> list[dict]:
    """Greedy episodes, one per group; per yes/no-phrased question answered: log-odds, gold, answer."""
    policy = LLMPolicy(model, tokenizer, 64, greedy=True, batch_size=8, decoding="constrained")
    policy.constrained.ask_shift = NEVER_ASK
    recorder = OddsRecorder(policy)
    executors = [Executor(g, g.questions[:questions], tokenizer, Memory(embedder), exec_cfg, episode_id=g.name)
                 for g in groups]
    run_executors(executors, recorder)
    rows = []
    for e in executors:
        for index, (question, record) in enumerate(zip(e.group.questions[:questions], e.records)):
            odds, gold = recorder.odds.get((e.episode_id, index)), gold_yes(question)
            if odds is None or gold is None or not is_yes_no_question(question.question) or record.advised:
                continue
            rows.append({"group": e.group.name, "question": question.id, "log_odds": odds, "gold_yes": gold})
    return rows


def summary(rows: list[dict], centre: float) -> dict:
    said_yes = [r["log_odds"] > 0 for r in rows]
    centred = [r["log_odds"] - centre for r in rows]
    right = [(c > 0) == r["gold_yes"] for c, r in zip(centred, rows)]
    return {"n": len(rows), "gold_yes": statistics.mean(r["gold_yes"] for r in rows),
            "answers_yes": statistics.mean(said_yes),
            "accuracy": statistics.mean(y == r["gold_yes"] for y, r in zip(said_yes, rows)),
            "auroc_gold_yes": auroc([r["log_odds"] for r in rows], [r["gold_yes"] for r in rows]),
            "recentred_accuracy": statistics.mean(right),
            "auroc_confidence_right": auroc([abs(c) for c in centred], right)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/yes-no-odds")
    p.add_argument("--questions", type=int, default=8, help="questions per training group")
    p.add_argument("--test-questions", type=int, default=10, help="questions per evaluated group")
    p.add_argument("--held-out-train", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    root = default_productqa_root()
    train_names, held = held_out_train_split(root, args.held_out_train)
    every = {g.name: g for split in ("train", "test") for g in load_split(root, split)}
    sets = {"training groups": ([every[n] for n in train_names], args.questions),
            "evaluated groups": ([every[g.name] for g in list_groups(root, "test")[:4]] + [every[n] for n in held],
                                 args.test_questions)}
    model, tokenizer = load_causal_lm("smollm2", device="cpu")
    embedder = Embedder()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for context, switches in CONTEXTS.items():
        exec_cfg = replace(ExecutorConfig(restate_question=True), **switches)
        played = {name: play(model, tokenizer, groups, q, exec_cfg, embedder) for name, (groups, q) in sets.items()}
        centre = statistics.median(r["log_odds"] for r in played["training groups"])
        results[context] = {"centre": centre, "rows": played,
                            **{name: summary(rows, centre) for name, rows in played.items()}}
        print(f"{context}: done", flush=True)
    (out / "yes_no_odds.json").write_text(json.dumps(results, indent=1))
    print("\n| context | groups | yes/no questions | gold yes | answers yes | right | AUROC log-odds, gold yes | "
          "right, recentred | AUROC confidence, right (recentred) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for context, r in results.items():
        for name in sets:
            s = r[name]
            print(f"| {context} | {name} | {s['n']} | {s['gold_yes']:.2f} | {s['answers_yes']:.2f} | "
                  f"{s['accuracy']:.2f} | {s['auroc_gold_yes']:.3f} | {s['recentred_accuracy']:.2f} | "
                  f"{s['auroc_confidence_right']:.3f} |")
        print(f"(centre for {context}: {r['centre']:+.3f}, the training groups' median log-odds)")


if __name__ == "__main__":
    main()
