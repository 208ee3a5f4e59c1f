"""The question stated again before the choice, and what the embedded agent then does, by how it is phrased.

PPO at c = 0.6 cannot split its advice by question kind partly because the question sits a hundred tokens before
the choice (the product's row and the memory follow it; ``agile_choice_diagnosis.py --probe-only``). Moving it
changes more than the choice: the constrained agent's answers are read off the same context. In AGILE's order and
with ``ExecutorConfig.restate_question`` (the question again as the context's last line) this evaluates the
embedded agent with constrained decoding on the training groups PPO plays
(``agile_ppo_costs.py``'s), twice: with ``[SeekAdvice]`` offered (its greedy advice rate) and without (how often it
is right answering itself), each split by phrasing (``agile.envs.phrasing``, what the agent sees). The trade-off
PPO must learn exists where answering yes/no-phrased questions pays more than 1 - c and the others less::

    python benchmarks/agents/agile_question_restated.py --questions 8 --out runs/question-restated
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile.envs.phrasing import is_yes_no_question  # noqa: E402
from agile.envs.productqa import default_productqa_root, held_out_train_split, load_split  # noqa: E402
from agile.executor.agent_eval import EvalConfig, run_eval  # noqa: E402

PLACES = {"AGILE's order": ("first", False), "restated last": ("restated", True)}


def by_phrasing(folder: Path, phrased: dict) -> dict[str, dict[str, float]]:
    """Per phrasing: sessions, share advised, share right, and share right among the sessions not advised."""
    rows = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines() if line]
    out = {}
    for kind in ("yes/no-phrased", "others"):
        mine = [r for r in rows if phrased[(r["group"], r["question_id"])] == (kind == "yes/no-phrased")]
        alone = [r for r in mine if not r["advised"]]
        out[kind] = {"n": len(mine), "advised": sum(r["advised"] for r in mine) / max(len(mine), 1),
                     "right_alone": sum(r["correct"] for r in alone) / max(len(alone), 1), "n_alone": len(alone),
                     "yes": sum(str(r.get("answer")).strip().lower() == "yes" for r in alone) / max(len(alone), 1)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/question-restated")
    p.add_argument("--questions", type=int, default=8, help="questions per group (one episode each)")
    p.add_argument("--held-out-train", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    groups = held_out_train_split(default_productqa_root(), args.held_out_train)[0]
    phrased = {(g.name, q.id): is_yes_no_question(q.question)
               for g in load_split(default_productqa_root(), "train") if g.name in groups for q in g.questions}
    results = {}
    for place, (name, restate) in PLACES.items():
        folder = Path(args.out) / name
        results[place] = {}
        for ablation, label in (("full", "advice offered"), ("no_advice", "no advice")):
            sub = folder / ablation
            if not (sub / "sessions.jsonl").is_file():
                run_eval(EvalConfig(model="smollm2", split="train", groups=groups, questions_per_group=args.questions,
                                    ablations=[ablation], decoding="constrained", restate_question=restate,
                                    max_new_tokens=64, device="cpu", out=str(sub)))
            results[place][label] = by_phrasing(sub, phrased)
    (Path(args.out) / "question_restated.json").write_text(json.dumps(results, indent=1))
    print(f"\n## The embedded agent in AGILE's order and with the question restated ({len(groups)} training groups, "
          f"{args.questions} questions each)\n")
    print("| question | phrasing | sessions | greedy asks (advice offered) | right alone (no advice) | "
          "answers yes (no advice) |")
    print("|---|---|---|---|---|---|")
    for place, r in results.items():
        for kind in ("yes/no-phrased", "others"):
            offered, alone = r["advice offered"][kind], r["no advice"][kind]
            print(f"| {place} | {kind} | {offered['n']} | {offered['advised']:.2f} | "
                  f"{alone['right_alone']:.2f} (n={alone['n_alone']}) | {alone['yes']:.2f} |")


if __name__ == "__main__":
    main()
