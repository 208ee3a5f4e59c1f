"""One-pass PRM scoring against per-prefix scoring: same model, same episodes, one run.

    python benchmarks/speed/prm_score.py                                   # tiny model, CPU
    python benchmarks/speed/prm_score.py --model smollm2 --episodes 4 --steps 4 8
    python benchmarks/speed/prm_score.py --model smollm2 --dtype bf16 --device cuda   # on a GPU

One-pass renders each episode once with a tag after every step and reads all step scores from
one forward pass; per-prefix feeds each step's prefix as its own sequence (what a PRM without
step tags would do). Both are timed with the same length-bucketed batching (the fair comparison:
only the redundant prefix tokens differ) and with one sequence per forward call (how a PRM is
often called). Throughput is episode tokens scored per second (the same numerator for both, so
the ratio is the time ratio); "fed ratio" is tokens pushed through the model, per-prefix over
one-pass; "max |diff|" is the largest score difference between the two (they must agree).
The phase rows split the batched one-pass time: rendering and tokenizing on the CPU, then the model's
forward passes alone (batches collated on the device beforehand), so a GPU figure says which bounds it.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

from prm.data.episodes import episodes_of
from prm.verifiers.model import ProcessRewardModel, parse_dtype
from prm.data.synthetic import synthetic_frame


def timed(fn, repeats: int):
    """(best wall time over ``repeats`` runs, the last run's result)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def score(prm, episodes, batch_tokens: int, per_prefix: bool):
    """Scores and tokens fed of one scoring run."""
    scores = prm.score_episodes(episodes, batch_tokens, per_prefix=per_prefix)
    if prm.device.type == "cuda":
        torch.cuda.synchronize()  # kernels run asynchronously; time them to completion
    return scores, prm.last_run["tokens"]


def phases(prm, episodes, batch_tokens: int, repeats: int) -> tuple[float, float, int]:
    """Seconds to render + tokenize, seconds of the forward passes alone, and the tokens they cover."""
    t_render, found = timed(lambda: prm.windows_for(episodes), repeats)
    batches = list(prm.batches(found, batch_tokens))

    def forward():
        with torch.inference_mode():
            for batch in batches:
                prm(batch)
        if prm.device.type == "cuda":
            torch.cuda.synchronize()

    t_forward, _ = timed(forward, repeats)
    return t_render, t_forward, sum(len(w.ids) for w in found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="backbone: tiny, smollm2, a HF id or a folder")
    parser.add_argument("--dtype", default=None, help="bf16, fp16 or fp32 (default: bf16 on GPU, fp32 on CPU)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--head", default="value", choices=["value", "tag"])
    parser.add_argument("--episodes", type=int, default=16, help="episodes per setting")
    parser.add_argument("--steps", type=int, nargs="+", default=[4, 8, 16], help="decision points per episode")
    parser.add_argument("--words-per-state", type=int, default=90, help="filler words in each state text")
    parser.add_argument("--batch-tokens", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (best is kept)")
    parser.add_argument(
        "--unbatched", action=argparse.BooleanOptionalAction, default=True, help="also time one sequence per forward"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    prm = ProcessRewardModel.create(args.model, head=args.head, device=args.device, dtype=parse_dtype(args.dtype))
    if args.head == "value":
        torch.nn.init.normal_(prm.head.linear.weight, std=0.1)
    device = prm.device
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.processor() or 'cpu'}, {torch.get_num_threads()} threads"
    )
    dtype = next(prm.backbone.parameters()).dtype
    print(
        f"model {args.model} ({sum(p.numel() for p in prm.backbone.parameters()) / 1e6:.1f}M parameters), "
        f"{str(dtype).replace('torch.', '')}, {device.type} ({where}), {args.episodes} episodes per row"
    )
    header = (
        f"{'steps':>5} {'tokens/ep':>9} | {'one-pass':>9} {'per-prefix':>10} {'speed-up':>8} | "
        f"{'one-pass':>9} {'per-prefix':>10} {'speed-up':>8} | {'fed ratio':>9} {'max |diff|':>10}"
    )
    print(f"{'':>15} | {'batched (tokens/s)':^30} | {'one sequence per forward':^30} |")
    print(header)
    print("-" * len(header))
    for steps in args.steps:
        frame = synthetic_frame(episodes=args.episodes, steps=steps, words_per_state=args.words_per_state, seed=steps)
        _, episodes = episodes_of(frame)
        score(prm, episodes[:1], args.batch_tokens, False)  # warm-up (first-call allocations)
        row, diff = [], 0.0
        for budget in (args.batch_tokens, 1) if args.unbatched else (args.batch_tokens,):
            # batch_tokens=1 puts every sequence in a forward call of its own
            t_one, (one, tokens) = timed(lambda eps=episodes, b=budget: score(prm, eps, b, False), args.repeats)
            t_per, (per, fed) = timed(lambda eps=episodes, b=budget: score(prm, eps, b, True), args.repeats)
            diff = max([diff] + [float(np.abs(a - b).max()) for a, b in zip(one, per)])
            row.append(f"{tokens / t_one:>9.0f} {tokens / t_per:>10.0f} {t_per / t_one:>7.1f}x")
        row += [f"{'-':>9} {'-':>10} {'-':>8}"] * (2 - len(row))
        print(f"{steps:>5} {tokens / len(episodes):>9.0f} | {row[0]} | {row[1]} | {fed / tokens:>9.2f} {diff:>10.1e}")
        t_render, t_forward, covered = phases(prm, episodes, args.batch_tokens, args.repeats)
        print(f"{'':>15} | one-pass phases: render + tokenize {covered / t_render:,.0f} tokens/s, "
              f"forward passes alone {covered / t_forward:,.0f} tokens/s")


if __name__ == "__main__":
    main()
