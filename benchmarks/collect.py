"""Decision points per second of the rollout loop: lockstep batches against one episode at a time.

    python benchmarks/collect.py                       # simulator + SmolLM2 (16 episodes x 4)
    python benchmarks/collect.py --llm-episodes 0      # simulator only
    python benchmarks/collect.py --data ../shared/productqa --llm-episodes 8 --questions 4

Both runs of a pair play the same episodes with the same agent, in lockstep (one agent call per
round for every live episode) and episode by episode; the ratio is lockstep / one at a time. The
machine is shared, so the runs go lockstep, one at a time, lockstep again and the lockstep time
is the mean of the two (a load that drifts during the run cancels out). For SmolLM2 the two
modes must also give the same actions (greedy decoding), which is checked.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agile.productqa_env import ProductQASource
from agile.rollout import run_episodes
from agile.simulator_agent import SimulatorAgent


def timed(source, agent, n, questions, seed, lockstep: bool, **kwargs):
    """Decision points per second, and the records, of ``n`` episodes."""
    episodes = source.episodes(range(n), seed, questions)
    start = time.perf_counter()
    if lockstep:
        records = run_episodes(episodes, agent, **kwargs)
    else:
        records = [run_episodes([e], agent, **kwargs)[0] for e in episodes]
    seconds = time.perf_counter() - start
    decisions = sum(len(rows) for rows in records)
    return decisions / seconds, seconds, records


def compare(label, source, agent, n, questions, **kwargs):
    """Lockstep, one at a time, lockstep again; print the rates and ratio; return the records."""
    first = timed(source, agent, n, questions, 0, True, **kwargs)
    single = timed(source, agent, n, questions, 0, False, **kwargs)
    second = timed(source, agent, n, questions, 0, True, **kwargs)
    decisions = sum(len(rows) for rows in single[2])
    sec_b, sec_s = (first[1] + second[1]) / 2, single[1]
    print(f"{label}: lockstep {decisions / sec_b:,.2f} decisions/s ({first[1]:.1f} s, {second[1]:.1f} s), "
          f"one at a time {decisions / sec_s:,.2f} decisions/s ({sec_s:.1f} s), ratio {sec_s / sec_b:.2f}x")
    return first[2], single[2]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="ProductQA root (default: the generated catalog)")
    parser.add_argument("--sim-episodes", type=int, default=512)
    parser.add_argument("--llm-episodes", type=int, default=16)
    parser.add_argument("--questions", type=int, default=4, help="questions per LLM episode")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.data is None:
        from agile.catalog_generator import default_catalog_dir

        args.data = str(default_catalog_dir(seed=0))
    source = ProductQASource(args.data, "test")
    print(f"data: {args.data} (test split, {len(source.group_names)} groups)")

    simulator = SimulatorAgent(memory_boost=0.1)
    kwargs = {"budget": 2, "explore_p": 0.3, "rng_seed": 0}
    compare(f"simulator, {args.sim_episodes} episodes x 8 questions", source, simulator, args.sim_episodes, 8,
            **kwargs)
    cf = timed(source, simulator, args.sim_episodes // 4, 8, 0, True, counterfactual=True, **kwargs)
    print(f"simulator with counterfactuals: {cf[0]:,.1f} decisions/s ({cf[1]:.1f} s)")

    if args.llm_episodes > 0:
        import torch

        from agile.llm_agent import LLMAgent

        if args.threads:
            torch.set_num_threads(args.threads)
        print(f"torch threads: {torch.get_num_threads()}")
        start = time.perf_counter()
        agent = LLMAgent(args.model, max_batch=args.llm_episodes)
        print(f"{args.model} loaded in {time.perf_counter() - start:.1f} s on {agent.model.device}")
        batched, single = compare(f"{args.model}, {args.llm_episodes} episodes x {args.questions} questions",
                                  source, agent, args.llm_episodes, args.questions)
        same = sum(a.action_text == b.action_text
                   for rows_a, rows_b in zip(batched, single) for a, b in zip(rows_a, rows_b))
        total = sum(len(rows) for rows in batched)
        print(f"identical actions lockstep vs one at a time: {same}/{total}")
        for qtype in ("fact_qa", "search_qa", "reasoning_qa"):
            rewards = [r.reward for rows in batched for r in rows if f'"type_{qtype}": 1.0' in r.features]
            if rewards:
                print(f"  {qtype}: accuracy {sum(rewards) / len(rewards):.2f} over {len(rewards)} questions")


if __name__ == "__main__":
    main()
