"""Decision points per second of the rollout loop: lockstep batches against one episode at a time.

    python benchmarks/speed/collect.py                       # simulator + SmolLM2 (16 episodes x 4)
    python benchmarks/speed/collect.py --llm-episodes 0      # simulator only
    python benchmarks/speed/collect.py --data ../shared/productqa --llm-episodes 8 --questions 4

Both runs of a pair play the same episodes with the same agent, in lockstep (one agent call per
round for every live episode) and episode by episode; the ratio is lockstep / one at a time. The
machine is shared, so the runs go lockstep, one at a time, lockstep again and the lockstep time
is the mean of the two (a load that drifts during the run cancels out). For SmolLM2 the two
modes must also give the same actions (greedy decoding), which is checked.

    python benchmarks/speed/collect.py --sim-episodes 0 --compare-cache --bf16
    python benchmarks/speed/collect.py --sim-episodes 0 --compare-cache --bf16 --data ../shared/productqa --llm-episodes 8

``--compare-cache`` measures the LLM agent's prompt key/value cache instead (``agile.agents.prompt_cache``)
on collection episodes (budget 2, intervention probability 0.3): the same episodes in lockstep
with the cache off (batched ``generate``: the agent before the cache), on, and off again (the off
time is the mean of the two runs), each run starting cold. It prints decisions/s of each, the
ratio, the CPU time of the process (steadier than the wall clock on a shared machine), how many
prompt tokens the cache reused, and checks that both give identical actions. ``--bf16`` adds,
between the cache-on and the second cache-off run, bfloat16 weights with the cache: its rate, how
many actions equal float32's, and its accuracy. ``--breakdown`` adds one more cache-on run
(per dtype) that times prompt prefill and decoding. The agent's answer cache is off in every LLM
run (it would answer repeated runs without the model).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.productqa_env import ProductQASource
from agile.rollout import run_episodes


def timed(source, agent, n, questions, seed, lockstep: bool, **kwargs):
    """Decision points per second, and the records, of ``n`` episodes."""
    episodes = source.episodes(range(n), seed, questions)
    if getattr(agent, "prefix_cache", None) is not None:
        agent.prefix_cache.clear()  # every run starts cold: a warm cache would replay earlier runs
    start, cpu = time.perf_counter(), time.process_time()
    if lockstep:
        records = run_episodes(episodes, agent, **kwargs)
    else:
        records = [run_episodes([e], agent, **kwargs)[0] for e in episodes]
    seconds = time.perf_counter() - start
    timed.cpu_seconds = time.process_time() - cpu  # CPU time of this process: less sensitive to other jobs
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


def compare_prefix_cache(label, source, agent, n, questions, half=None, **kwargs):
    """Prompt cache off, on, (bfloat16 with the cache,) off: print the rates, the ratios, the
    reuse; check identical actions. Returns the records of the cache-on run."""
    from agile.agents.prompt_cache import PromptKVCache

    budget = agent.prefix_cache.max_tokens if agent.prefix_cache is not None else 16_384
    runs, cpu = {}, {}
    for name in ("off", "on", "bf16", "off2"):
        if name == "bf16" and half is None:
            continue
        agent.prefix_cache = PromptKVCache(agent.model, budget) if name == "on" else None
        runs[name] = timed(source, half if name == "bf16" else agent, n, questions, 0, True, **kwargs)
        cpu[name] = timed.cpu_seconds
        if name == "on":
            cache = agent.prefix_cache
    decisions = sum(len(rows) for rows in runs["on"][2])
    sec_off, sec_on = (runs["off"][1] + runs["off2"][1]) / 2, runs["on"][1]
    cpu_off = (cpu["off"] + cpu["off2"]) / 2
    print(f"{label}: prompt cache off {decisions / sec_off:.3f} decisions/s ({runs['off'][1]:.1f} s, "
          f"{runs['off2'][1]:.1f} s), on {decisions / sec_on:.3f} decisions/s ({sec_on:.1f} s), "
          f"ratio {sec_off / sec_on:.2f}x")
    print(f"  CPU time of this process: off {cpu['off']:.1f} s, {cpu['off2']:.1f} s, on {cpu['on']:.1f} s, "
          f"ratio {cpu_off / cpu['on']:.2f}x")
    print(f"  prompt cache: {cache.hits}/{cache.prompts} prompts reused a prefix, "
          f"{cache.reused_tokens:,}/{cache.prompt_tokens:,} prompt tokens reused "
          f"({cache.reused_tokens / max(1, cache.prompt_tokens):.0%})")
    pairs = [(a.action_text, b.action_text) for first in (runs["off"][2], runs["off2"][2])
             for rows_a, rows_b in zip(first, runs["on"][2]) for a, b in zip(rows_a, rows_b)]
    print(f"  identical actions cache off vs on: {sum(a == b for a, b in pairs)}/{len(pairs)} "
          "(both off runs against the on run)")
    if half is not None:
        sec_half, records = runs["bf16"][1], runs["bf16"][2]
        same = sum(a.action_text == b.action_text for rows_a, rows_b in zip(runs["on"][2], records)
                   for a, b in zip(rows_a, rows_b))
        print(f"  bfloat16 weights + prompt cache: {decisions / sec_half:.3f} decisions/s ({sec_half:.1f} s), "
              f"ratio {sec_off / sec_half:.2f}x against float32 cache off (CPU time {cpu_off / cpu['bf16']:.2f}x); "
              f"actions equal to float32: {same}/{decisions} (not the same model: rounding changes answers)")
        for qtype in ("fact_qa", "search_qa", "reasoning_qa"):
            rewards = [r.reward for rows in records for r in rows if f'"type_{qtype}": 1.0' in r.features]
            if rewards:
                print(f"  bfloat16 {qtype}: accuracy {sum(rewards) / len(rewards):.2f} over {len(rewards)} questions")
    return runs["on"][2]


def breakdown(label, source, agent, n, questions, **kwargs) -> None:
    """One more cache-on run with CPU timers around the prompt prefills and the batched decoding."""
    from agile.agents import llm_agent
    from agile.agents.prompt_cache import PromptKVCache

    agent.prefix_cache = cache = PromptKVCache(agent.model, agent.prefix_cache.max_tokens
                                               if agent.prefix_cache is not None else 16_384)
    spent = {"prefill": 0.0, "decode": 0.0, "calls": 0, "steps": 0, "rows": 0, "capped": 0}
    prefill, decode = cache.prefill, llm_agent.greedy_continue

    def timed_prefill(ids):
        start = time.process_time()
        result = prefill(ids)
        spent["prefill"] += time.process_time() - start
        return result

    def timed_decode(model, rows, stops, eos, max_new_tokens):
        start = time.process_time()
        outputs = decode(model, rows, stops, eos, max_new_tokens)
        spent["decode"] += time.process_time() - start
        spent["calls"] += 1
        spent["steps"] += max(len(o) for o in outputs)
        spent["rows"] += len(outputs)
        spent["capped"] += sum(len(o) == max_new_tokens for o in outputs)
        return outputs

    cache.prefill, llm_agent.greedy_continue = timed_prefill, timed_decode
    try:
        timed(source, agent, n, questions, 0, True, **kwargs)
    finally:
        llm_agent.greedy_continue = decode
    computed = cache.prompt_tokens - cache.reused_tokens
    print(f"{label}: CPU {timed.cpu_seconds:.1f} s: prefill {spent['prefill']:.1f} s ({cache.prompts} prompts, "
          f"{computed:,} of {cache.prompt_tokens:,} tokens computed, "
          f"{computed / max(spent['prefill'], 1e-9):.0f} tokens/s), decoding {spent['decode']:.1f} s "
          f"({spent['calls']} batched calls, {spent['steps']} steps, {spent['rows']} rows, "
          f"{spent['capped']} ran to the {agent.max_new_tokens}-token cap)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="ProductQA root (default: the generated catalog)")
    parser.add_argument("--sim-episodes", type=int, default=512)
    parser.add_argument("--llm-episodes", type=int, default=16)
    parser.add_argument("--questions", type=int, default=4, help="questions per LLM episode")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--compare-cache", action="store_true",
                        help="LLM: prompt key/value cache off / on / off instead of lockstep / one at a time")
    parser.add_argument("--breakdown", action="store_true",
                        help="with --compare-cache: one more cache-on run timing prefill and decoding")
    parser.add_argument("--bf16", action="store_true",
                        help="with --compare-cache: also bfloat16 weights with the cache (not the same outputs)")
    args = parser.parse_args(argv)
    if args.data is None:
        from agile.envs.catalog_generator import default_catalog_dir

        args.data = str(default_catalog_dir(seed=0))
    source = ProductQASource(args.data, "test")
    print(f"data: {args.data} (test split, {len(source.group_names)} groups)")

    simulator = SimulatorAgent(memory_boost=0.1)
    kwargs = {"budget": 2, "explore_p": 0.3, "rng_seed": 0}
    if args.sim_episodes > 0:
        compare(f"simulator, {args.sim_episodes} episodes x 8 questions", source, simulator, args.sim_episodes, 8,
                **kwargs)
        cf = timed(source, simulator, args.sim_episodes // 4, 8, 0, True, counterfactual=True, **kwargs)
        print(f"simulator with counterfactuals: {cf[0]:,.1f} decisions/s ({cf[1]:.1f} s)")

    if args.llm_episodes > 0:
        import torch

        from agile.agents.llm_agent import LLMAgent

        if args.threads:
            torch.set_num_threads(args.threads)
        print(f"torch threads: {torch.get_num_threads()}")
        start = time.perf_counter()
        agent = LLMAgent(args.model, max_batch=args.llm_episodes, cache_size=0)
        print(f"{args.model} loaded in {time.perf_counter() - start:.1f} s on {agent.model.device}")
        label = f"{args.model}, {args.llm_episodes} episodes x {args.questions} questions"
        if args.compare_cache:
            half = LLMAgent(args.model, max_batch=args.llm_episodes, cache_size=0, dtype="bfloat16") \
                if args.bf16 else None
            batched = compare_prefix_cache(label, source, agent, args.llm_episodes, args.questions, half, **kwargs)
            if args.breakdown:
                for name, which in (("float32", agent), ("bfloat16", half)):
                    if which is not None:
                        breakdown(f"  where the time goes, {name} + cache", source, which, args.llm_episodes,
                                  args.questions, **kwargs)
        else:
            batched, single = compare(label, source, agent, args.llm_episodes, args.questions)
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
