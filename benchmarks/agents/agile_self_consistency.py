"""Does the compute help pay on ProductQA? Per-decision accuracy and seconds of the greedy agent, of
self-consistency at k samples (``agile.executor.self_consistency``, the ``compute`` help) and of the human.

    python benchmarks/agents/agile_self_consistency.py --episodes 4 --questions 12 --shared --threads 1

(about 4 minutes on a loaded 2-core CPU; its figures: ``benchmarks/RESULTS.md``, "The compute help on ProductQA").

Held-out groups (the test split of ``../shared/productqa``), the embedded SmolLM2 in bf16 under constrained
decoding, the product's memory (MiniLM embeddings). The greedy agent plays each episode on; at every decision
each other method acts on a copy of the same state (paired: the same decisions, the same context), and its
answer is scored by the executor (``agile.envs.answer_eval``); the human is right by construction. Each method
decodes with a prompt cache of its own, so none is timed on another's prefill: its seconds per decision are
those of an agent that runs alone. The compute help in the product shares the base agent's cache; ``--shared``
also times it so, after the greedy turn of the same decision (its marginal cost after a proposal).
Prints one line per method: accuracy over the decisions, seconds per decision, and against greedy the turns the
vote moved, the decisions it won and lost, and the exact two-sided sign test of those.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from agile.agents.prompt_cache import PromptKVCache  # noqa: E402
from agile.executor.episode import AgileSource  # noqa: E402
from agile.executor.self_consistency import SelfConsistencyAgent  # noqa: E402
from agile.rollout import decide  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test of ``wins`` against ``losses`` (ties dropped)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def methods(source: AgileSource, samples: list[int], seed: int, shared: bool) -> dict:
    """Name -> actor (None: the human): greedy, compute@k each with its own prompt cache, and with ``shared`` the
    largest k on the base agent's cache."""
    base = source.agent()
    out = {"greedy": base}
    for k in samples:
        agent = SelfConsistencyAgent(base.policy, k, seed=seed, name=f"compute@{k}")
        agent.decoder.cache = PromptKVCache(agent.decoder.model, base.policy.constrained.cache.max_tokens)
        out[agent.name] = agent
    if shared:
        k = max(samples)
        out[f"compute@{k} shared"] = SelfConsistencyAgent(base.policy, k, seed=seed, name=f"compute@{k}")
    out["human"] = None
    return out


def play(source: AgileSource, actors: dict, episodes: int, questions: int, seed: int) -> dict:
    """Per method: the reward (1[correct]) and turn of each decision, and the seconds spent deciding."""
    live_episodes = source.episodes(range(episodes), seed, questions)
    said = {name: {"correct": [], "turns": [], "seconds": 0.0} for name in actors}
    alone = [name for name in actors if actors[name] is not None and not name.endswith("shared")]
    for round_index in range(questions):
        live = [e for e in live_episodes if not e.done]
        if not live:
            break
        copies = {name: [e.clone() for e in live] for name in actors if name != "greedy"}
        # The methods that run alone take turns at going first (a loaded machine's noise spread over them); the
        # shared cache's after greedy (its prefill), the human last (its reflection writes into that cache).
        turn = round_index % len(alone)
        order = alone[turn:] + alone[:turn] + [name for name in actors if name not in alone]
        for name in order:
            actor = actors[name]
            batch = live if name == "greedy" else copies[name]
            start = time.perf_counter()
            decisions = decide(batch, [actor] * len(batch), seed)
            said[name]["seconds"] += time.perf_counter() - start
            said[name]["correct"] += [d.result.reward for d in decisions]
            said[name]["turns"] += [d.actions[-1].token_ids or d.action_text for d in decisions]
        print(f"[{time.strftime('%H:%M:%S')}] {len(said['greedy']['correct'])} decisions", flush=True)
    return said


def report(said: dict) -> None:
    greedy = said["greedy"]
    n = len(greedy["correct"])
    print(f"{'method':<20s} {'accuracy':>14s} {'s/decision':>11s}   against greedy")
    for name, rows in said.items():
        right = sum(rows["correct"])
        line = f"{name:<20s} {right / n:6.3f} ({int(right):>2d}/{n}) {rows['seconds'] / n:11.2f}"
        if name not in ("greedy", "human"):
            moved = sum(a != b for a, b in zip(rows["turns"], greedy["turns"]))
            wins = sum(a > b for a, b in zip(rows["correct"], greedy["correct"]))
            losses = sum(a < b for a, b in zip(rows["correct"], greedy["correct"]))
            line += (f"   {(right - sum(greedy['correct'])) / n:+.3f}; turns moved {moved}, won {wins}, lost {losses}"
                     f" (sign test p = {sign_test(wins, losses):.2f})")
        print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "productqa"), help="ProductQA root")
    parser.add_argument("--episodes", type=int, default=4, help="episodes, round-robin over the test groups")
    parser.add_argument("--questions", type=int, default=8, help="questions (decisions) per episode")
    parser.add_argument("--samples", type=int, nargs="+", default=[4, 8], help="k of each compute help measured")
    parser.add_argument("--shared", action="store_true", help="also time the largest k on the base agent's cache")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    source = AgileSource(args.data, "test", model=args.model, decoding="constrained", dtype=args.dtype, seed=args.seed)
    actors = methods(source, args.samples, args.seed, args.shared)
    print(f"{args.model} ({args.dtype}), {args.episodes} episodes x {args.questions} questions of the test groups "
          f"{source.group_names}, seed {args.seed}, {args.threads} thread(s)", flush=True)
    report(play(source, actors, args.episodes, args.questions, args.seed))
    print(f"wall {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
