"""PPO step throughput of the AGILE agent: rollout, scoring and update measured separately.

Runs real session-level PPO iterations on ProductQA train groups (tiny model on CPU by default)
and reports tokens/s for each phase plus peak memory. Baselines measured in the same run:
unbatched rollouts (one prompt per generate call) against batched ones, and the update's
tokens/s against the no-grad scoring pass over the same sessions::

    python benchmarks/speed/ppo_throughput.py --model tiny --threads 1
    python benchmarks/speed/ppo_throughput.py --model smollm2 --episodes 2 --questions 2 --iterations 1
    python benchmarks/speed/ppo_throughput.py --model smollm2 --device cuda --episodes 8 --batch-size 32   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile.train.ppo import PPOConfig, train  # noqa: E402


def run(args, rollout_batch_size: int, out: str) -> dict:
    cfg = PPOConfig(model=args.model, groups=args.groups, questions_per_episode=args.questions,
                    episodes_per_iteration=args.episodes, iterations=args.iterations,
                    max_new_tokens=args.max_new_tokens, rollout_batch_size=rollout_batch_size,
                    minibatch_size=4, micro_batch_size=2, update_epochs=1, device=args.device,
                    out=out, save=False, seed=args.seed)
    result = train(cfg, log=lambda *_: None)
    # The last iteration is warm (allocator, caches); its numbers are the ones reported.
    return result["history"][-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny")
    p.add_argument("--groups", nargs="+", default=["blades", "headphones"])
    p.add_argument("--episodes", type=int, default=4, help="episodes per iteration")
    p.add_argument("--questions", type=int, default=4, help="sessions per episode")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the accelerator the phases run on)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="also write the numbers to this file")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    batched = run(args, args.batch_size, "/tmp/ppo_throughput_batched")
    single = run(args, 1, "/tmp/ppo_throughput_single")

    def rollout_tps(row):
        return (row["rollout_prompt_tokens"] + row["rollout_generated_tokens"]) / row["rollout_seconds"]

    table = {
        "sessions per iteration": batched["sessions"],
        "rollout generated tokens/s (batched)": batched["rollout_generated_tokens_per_s"],
        "rollout prompt+generated tokens/s (batched, wall)": rollout_tps(batched),
        "rollout prompt+generated tokens/s (1 prompt per call, wall)": rollout_tps(single),
        "batched / unbatched rollout": rollout_tps(batched) / rollout_tps(single),
        "scoring (old + reference log-probs, values) tokens/s": batched["score_tokens_per_s"],
        "update (forward + backward + step) tokens/s": batched["update_tokens_per_s"],
        "update / scoring": batched["update_tokens_per_s"] / batched["score_tokens_per_s"],
        "rollout seconds": batched["rollout_seconds"],
        "update seconds": batched["update_seconds"],
        "peak memory (MiB, process RSS)": batched["peak_memory_mb"],
    }
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"\nPPO throughput: model={args.model}, device={args.device} ({where}), threads={args.threads}, {args.episodes} episodes x "
          f"{args.questions} sessions, max_new_tokens={args.max_new_tokens} "
          f"({time.perf_counter() - start:.0f}s in all)\n")
    print("| measure | value |\n|---|---|")
    for k, v in table.items():
        print(f"| {k} | {v:.3g} |" if isinstance(v, float) else f"| {k} | {v} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "table": table,
                                               "batched": batched, "single": single}, indent=1))


if __name__ == "__main__":
    main()
