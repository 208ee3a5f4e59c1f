"""AGILE on ProductQA: prompt-only -> SFT -> PPO, ablations and an advice-cost sweep.

Trains on train groups of ../shared/productqa and evaluates on its test groups, printing
accuracy / advice rate / total score per group and averaged (Markdown, for RESULTS.md). Every
stage writes its result under --out and is skipped when that file exists, so a stopped run
resumes where it was. A reduced CPU run (the sizes are flags)::

    python benchmarks/agents/agile_productqa.py --out runs/bench_agile --threads 1 \\
        --train-groups 8 --train-questions 20 --test-questions 15 --ppo-iterations 3

Stages: ``prompt`` (the embedded SmolLM2 with no training), ``sft``, ``ppo``, ``ablations``
(the PPO model without memory / tools / advice / reflection; "without RL" is the SFT row) and
``cost`` (a PPO run per advice cost c, evaluated at that c). Each evaluation reports the
policy's own advice and, beside it, a gate (NoveltyGate) deciding advice within a budget.

``--agent constrained``: the agent is the embedded model with constrained decoding (no SFT; the
``sft`` stage is skipped), and PPO trains its function choice (``agile.train.choices``).
``--held-out-train N``: N train groups (every fifth by name) are kept out of training and evaluated
beside the test groups, for more unseen groups than the test split holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile.envs.productqa import default_productqa_root, held_out_train_split, list_groups  # noqa: E402
from agile.executor.agent_eval import markdown_table  # noqa: E402
from agile.train.ppo import PPOConfig, train  # noqa: E402
from agile.train.sft import SFTConfig, run_sft  # noqa: E402
from helper.evaluation.agile_advice import AgileEvalConfig  # noqa: E402
from helper.evaluation.agile_advice import run as agile_eval  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stage(path: Path, fn):
    """Run ``fn`` unless ``path`` holds its earlier result; returns the result."""
    if path.is_file():
        log(f"skip {path.name} (exists)")
        return json.loads(path.read_text())
    start = time.perf_counter()
    result = fn()
    result["stage_seconds"] = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))
    log(f"done {path.name} in {result['stage_seconds']:.0f}s")
    return result


def episodes_tag(args) -> str:
    """Suffix of an evaluation's folder when groups play several episodes (one episode keeps the old names)."""
    return f"_e{args.test_episodes}" if args.test_episodes > 1 else ""


def evaluate(args, model: str, out: Path, label: str, ablations=("full",), gate="novelty",
             advice_cost=0.3, ask_shift: float = 0.0) -> dict:
    """``agile eval`` of ``model`` on the evaluated groups (``ask_shift``: as ``EvalConfig.ask_shift``)."""
    cfg = AgileEvalConfig(model=model, split=args.eval_split, decoding=decoding(args), groups=args.test_group_names,
                     ask_shift=ask_shift,
                     questions_per_group=args.test_questions, episodes_per_group=args.test_episodes,
                     ablations=list(ablations), gate=gate, advice_cost=advice_cost,
                     max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                     restate_question=args.restate_question, list_advice_with_gate=args.list_advice_with_gate,
                     yes_no_threshold=args.yes_no_threshold, device="cpu",
                     out=str(out / f"eval_{label}{episodes_tag(args)}"))
    rows = agile_eval(cfg, log=log)
    for r in rows:
        r["model"] = label
    return {"rows": rows, "config": asdict(cfg)}


def parser(description: str = __doc__) -> argparse.ArgumentParser:
    """The run's sizes; ``benchmarks/agents/agile_join.py`` shares them, so it reuses this run's models."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/bench_agile")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--train-groups", type=int, default=8, help="first N train groups (by name)")
    p.add_argument("--train-questions", type=int, default=20, help="SFT sessions per train group")
    p.add_argument("--test-groups", type=int, default=4)
    p.add_argument("--test-questions", type=int, default=15, help="evaluated sessions per test group")
    p.add_argument("--test-episodes", type=int, default=1,
                   help="episodes per test group, each of --test-questions questions with memory starting empty")
    p.add_argument("--sft-epochs", type=float, default=1.0)
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--ppo-iterations", type=int, default=3)
    p.add_argument("--ppo-episodes", type=int, default=4, help="episodes per PPO iteration")
    p.add_argument("--ppo-questions", type=int, default=4, help="sessions per PPO episode")
    p.add_argument("--ppo-lr", type=float, default=5e-5)
    p.add_argument("--estimator", default="gae", choices=["gae", "loop", "grpo", "distinct", "natural"])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--costs", default="0.1,0.2,0.3,0.4,0.5")
    p.add_argument("--agent", choices=("sft", "constrained"), default="sft",
                   help="sft: the model after imitation, free decoding; constrained: the embedded model with "
                        "constrained decoding, no SFT, PPO over its function choice")
    p.add_argument("--held-out-train", type=int, default=0,
                   help="train groups (every fifth by name) kept out of training and evaluated with the test groups")
    p.add_argument("--ppo-rollouts", type=int, default=2, help="rollouts per session (loop / grpo)")
    p.add_argument("--ppo-lora-layers", type=int, default=0, help="LoRA on the last N decoder layers only (0: all)")
    p.add_argument("--ppo-epochs", type=int, default=2, help="PPO update epochs per iteration")
    p.add_argument("--ppo-minibatch", type=int, default=4, help="sessions per PPO optimizer step")
    p.add_argument("--restate-question", action="store_true",
                   help="the executor states the question again right before the choice (ExecutorConfig.restate_question)")
    p.add_argument("--list-advice-with-gate", action="store_true",
                   help="a gate's runs show the agent [SeekAdvice] in its system text too (the same context as PPO's)")
    p.add_argument("--yes-no-threshold", type=float, default=0.0,
                   help="the constrained agent answers yes above this log-odds of yes against no, everywhere it plays "
                        "(ExecutorConfig.yes_no_threshold; agile_yes_no_odds.py prints the training groups' median); "
                        "give it an --out of its own: stages are reused by file name")
    p.add_argument("--ppo-choice-head", action="store_true",
                   help="PPO trains a linear head on the choice state that moves [SeekAdvice]'s score (constrained)")
    p.add_argument("--ppo-freeze-lm", action="store_true", help="with --ppo-choice-head: the head alone trains")
    p.add_argument("--ppo-head-lr", type=float, default=1e-2, help="the choice head's learning rate")
    p.add_argument("--ppo-head-components", type=int, default=0,
                   help="the choice head reads this many principal components of the choice state (0: all of it)")
    p.add_argument("--seed", type=int, default=0,
                   help="PPO's seed (and, in agile_join.py, the collection's, the PRM's, the helpers' and the gates' draws)")
    p.add_argument("--ppo-stop-flat", type=int, default=0,
                   help="stop PPO once advice rate and total score are flat over two windows of this many iterations")
    return p


def decoding(args) -> str:
    return "constrained" if args.agent == "constrained" else "free"


def base_model(args, out: Path) -> str:
    """The agent PPO starts from and the helper decides for: the SFT model, or the embedded one."""
    return args.model if args.agent == "constrained" else str(out / "sft" / "model")


def prepare(args) -> list[str]:
    """Threads and groups of the run: returns the train group names, sets ``args.test_group_names``."""
    torch.set_num_threads(args.threads)
    root = default_productqa_root()
    train_groups, held = held_out_train_split(root, args.held_out_train)
    train_groups = train_groups[:args.train_groups]
    args.test_group_names = [g.name for g in list_groups(root, "test")][:args.test_groups] + held
    args.eval_split = "all" if held else "test"
    log(f"train groups {train_groups}; evaluated groups {args.test_group_names} ({len(held)} held out of train)")
    return train_groups


def sft_stage(args, out: Path, train_groups: list[str]) -> dict:
    """Imitation training on the train groups' gold sessions (model in ``out/sft/model``)."""
    if args.agent == "constrained":
        return {"skipped": "the constrained agent needs no SFT"}

    def do_sft():
        cfg = SFTConfig(model=args.model, groups=train_groups, questions_per_group=args.train_questions,
                        epochs=args.sft_epochs, lr=args.sft_lr, batch_size=4, micro_batch_size=2,
                        device="cpu", out=str(out / "sft"), log_every=5)
        summary = run_sft(cfg)
        summary.pop("model", None)
        return summary
    return stage(out / "sft_train.json", do_sft)


def ppo_stage(args, out: Path, train_groups: list[str], advice_cost: float, tag: str) -> dict:
    """Session-level PPO from the SFT model at ``advice_cost`` (model in ``out/<tag>/model``)."""
    def do_ppo():
        cfg = PPOConfig(model=base_model(args, out), groups=train_groups, decoding=decoding(args),
                        questions_per_episode=args.ppo_questions, episodes_per_iteration=args.ppo_episodes,
                        iterations=args.ppo_iterations, estimator=args.estimator, stop_when_flat=args.ppo_stop_flat,
                        rollouts_per_task=1 if args.estimator == "gae" else args.ppo_rollouts, advice_cost=advice_cost,
                        lr=args.ppo_lr, max_new_tokens=args.max_new_tokens, minibatch_size=args.ppo_minibatch,
                        lora_layers=args.ppo_lora_layers, update_epochs=args.ppo_epochs,
                        micro_batch_size=2, rollout_batch_size=args.batch_size, device="cpu",
                        restate_question=args.restate_question, yes_no_threshold=args.yes_no_threshold,
                        choice_head=args.ppo_choice_head,
                        freeze_lm=args.ppo_freeze_lm, head_lr=args.ppo_head_lr,
                        head_components=args.ppo_head_components,
                        cpu_threads=args.threads, seed=args.seed, out=str(out / tag))
        result = train(cfg, log=log)
        return {"history": result["history"], "model_dir": result.get("model_dir"),
                "training_human_calls": result.get("training_human_calls")}
    return stage(out / f"{tag}_train.json", do_ppo)


def cost_stage(args, out: Path, train_groups: list[str], advice_cost: float) -> dict:
    """A PPO run trained at ``advice_cost`` and evaluated at it with its own advice: the eval stage."""
    tag = f"ppo_c{advice_cost:g}"
    ppo_stage(args, out, train_groups, advice_cost, tag)
    return stage(out / f"{tag}_eval{episodes_tag(args)}.json", lambda: evaluate(
        args, str(out / tag / "model"), out, f"PPO c={advice_cost:g}", gate="none", advice_cost=advice_cost))


def main() -> None:
    p = parser()
    p.add_argument("--stages", default="prompt,sft,ppo,ablations",
                   help="comma list of prompt, sft, ppo, ablations, cost")
    args = p.parse_args()
    out = Path(args.out)
    stages = set(args.stages.split(","))
    train_groups = prepare(args)
    results = {}

    if "prompt" in stages:
        results["prompt"] = stage(out / f"prompt{episodes_tag(args)}.json", lambda: evaluate(args, args.model, out, "prompt-only"))

    sft_dir = out / "sft"
    if stages & {"sft", "ppo", "ablations", "cost"}:
        results["sft_train"] = sft_stage(args, out, train_groups)
        if "sft" in stages:
            results["sft"] = stage(out / f"sft_eval{episodes_tag(args)}.json",
                                   lambda: evaluate(args, str(sft_dir / "model"), out, "SFT"))
    if stages & {"ppo", "ablations"}:
        results["ppo_train"] = ppo_stage(args, out, train_groups, 0.3, "ppo")
        if "ppo" in stages:
            results["ppo"] = stage(out / f"ppo_eval{episodes_tag(args)}.json",
                                   lambda: evaluate(args, str(out / "ppo" / "model"), out, "PPO"))
    if "ablations" in stages:
        results["ablations"] = stage(out / f"ablations{episodes_tag(args)}.json", lambda: evaluate(
            args, str(out / "ppo" / "model"), out, "PPO-ablation",
            ablations=("no_memory", "no_tools", "no_advice", "no_reflection"), gate="none"))
    if "cost" in stages:
        for c in [float(x) for x in args.costs.split(",")]:
            results[f"ppo_c{c:g}"] = cost_stage(args, out, train_groups, c)

    print("\n## ProductQA results\n")
    rows = [r for key in ("prompt", "sft", "ppo", "ablations") if key in results
            for r in results[key]["rows"]]
    rows += [r for key, v in results.items() if key.startswith("ppo_c") for r in v["rows"]]
    print(markdown_table(rows))
    for key in ("sft_train", "ppo_train"):
        if key in results:
            print(f"\n{key}: {json.dumps({k: v for k, v in results[key].items() if k != 'config'}, default=str)[:3000]}")


if __name__ == "__main__":
    main()
