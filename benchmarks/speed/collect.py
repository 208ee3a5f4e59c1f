"""Decision points per second of ProductQA collection: the simulator in lockstep against one episode at a
time, and the constrained LLM policy with its prompt cache against the same policy without it.

    python benchmarks/speed/collect.py                       # simulator + SmolLM2 (8 episodes x 4)
    python benchmarks/speed/collect.py --llm-episodes 0      # simulator only
    python benchmarks/speed/collect.py --sim-episodes 0 --data ../shared/productqa --llm-episodes 8 --questions 4
    python benchmarks/speed/collect.py --sim-episodes 0 --bf16 --breakdown

Every episode is a session of the AGILE executor (``agile.executor.episode.AgileSource``) on the test
split, collected as ``helpgate collect`` does: budget 2, intervention probability 0.3, every live
episode advanced once per round (lockstep).

**Simulator** (``SimulatorAgent``; the source loads no LLM): both runs of a pair play the same episodes,
in lockstep (one agent call per round for every live episode) and episode by episode; the ratio is
lockstep / one at a time. The machine is shared, so the runs go lockstep, one at a time, lockstep
again and the lockstep time is the mean of the two (a load that drifts during the run cancels out).
Then the same in lockstep with counterfactual branches.

**LLM** (``AgileAgent`` over ``LLMPolicy(decoding="constrained")``, the base agent of ``helpgate
pipeline``): the constrained decoder runs every prompt through a key/value cache
(``policy.constrained.cache``, ``agile.agents.prompt_cache.PromptKVCache``): a turn prefills its
context once and scores the functions, query units and answer lines from it, and the sessions of a
group share the system text and schema. The same episodes run with the cache off (a cache that keeps
nothing, so each prefill runs the whole prompt), on, and off again (the off time is the mean of the
two runs), each run starting cold. It prints decisions/s of each, the ratio, the CPU time of the
process (steadier than the wall clock on a shared machine), the prompt tokens that ran through the
model in each, and checks that both give identical actions. ``--bf16`` adds, between the cache-on and
the second cache-off run, bfloat16 weights with the cache: its rate, how many actions equal float32's,
and its accuracy. ``--breakdown`` adds one more cache-on run (per dtype) that times prompt prefill,
candidate scoring and free decoding. The policy's turn memo is off in every LLM run (it would answer
repeated runs without the model).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agile.agents.simulator_agent import SimulatorAgent
from agile.executor.episode import MEMORIES, AgileSource, model_folder
from agile.executor.lexical import LexicalEmbedder
from agile.executor.memory import Embedder
from agile.rollout import run_episodes
from prm.data.folds import task_type

OFF_TOKENS = 1
"""A cache of this many tokens keeps no prompt (every prompt is longer): each prefill runs it whole."""
CACHE_TOKENS = 16_384
"""The decoder's own cache size (``ConstrainedDecoder``'s default)."""


class ColdSource(AgileSource):
    """The test split's ``AgileSource`` with a fresh embedder for every ``episodes`` call (a warm one's
    text cache would let a later run skip the embeddings an earlier one computed) and, for the LLM,
    the policy built here (``measured_policy``), which its episodes reflect with."""

    def __init__(self, root, memory: str, policy=None, model: str | None = None):
        super().__init__(root, "test", model=model, decoding="constrained", memory=memory)
        self.measured = policy

    @property
    def policy(self):
        return self.measured

    def embedder(self):
        return Embedder() if self.memory == "embedding" else LexicalEmbedder()


def measured_policy(model: str, max_new_tokens: int, dtype: str | None = None, device: str | None = None):
    """The constrained greedy policy ``load_policy`` builds, with its turn memo off."""
    import torch

    from agile.executor.policy import LLMPolicy
    from agile.models import load_causal_lm

    llm, tokenizer = load_causal_lm(model_folder(model), device=device, dtype=getattr(torch, dtype) if dtype else None)
    return LLMPolicy(llm, tokenizer, max_new_tokens, greedy=True, memo=False, decoding="constrained")


def timed(source, agent, n, questions, seed, lockstep: bool, **kwargs):
    """Decision points per second, seconds, and the records, of ``n`` episodes."""
    episodes = source.episodes(range(n), seed, questions)
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


def actions(records) -> list[str]:
    return [r.action_text for rows in records for r in rows]


def print_accuracy(label, records) -> None:
    for qtype in ("fact_qa", "search_qa", "reasoning_qa"):
        rewards = [r.reward for rows in records for r in rows if task_type(r.task_id) == qtype]
        if rewards:
            print(f"  {label}{qtype}: accuracy {sum(rewards) / len(rewards):.2f} over {len(rewards)} questions")


def compare_prompt_cache(label, sources, n, questions, **kwargs):
    """Prompt cache off, on, (bfloat16 with the cache,) off: print the rates, the ratios, the tokens
    prefilled; check identical actions. ``sources``: float32's, and bfloat16's or None. Returns the
    records of the cache-on run."""
    from agile.agents.prompt_cache import PromptKVCache

    source, half = sources
    runs, cpu, caches = {}, {}, {}
    for name in ("off", "on", "bf16", "off2"):
        if name == "bf16" and half is None:
            continue
        which = half if name == "bf16" else source
        decoder = which.policy.constrained
        # A fresh cache each run: a warm one would replay the earlier runs' prompts.
        decoder.cache = caches[name] = PromptKVCache(decoder.model, OFF_TOKENS if name.startswith("off")
                                                     else CACHE_TOKENS)
        runs[name] = timed(which, which.agent(), n, questions, 0, True, **kwargs)
        cpu[name] = timed.cpu_seconds
    source.policy.constrained.cache = PromptKVCache(source.policy.model, CACHE_TOKENS)
    decisions = sum(len(rows) for rows in runs["on"][2])
    sec_off, sec_on = (runs["off"][1] + runs["off2"][1]) / 2, runs["on"][1]
    cpu_off = (cpu["off"] + cpu["off2"]) / 2
    print(f"{label}: prompt cache off {decisions / sec_off:.3f} decisions/s ({runs['off'][1]:.1f} s, "
          f"{runs['off2'][1]:.1f} s), on {decisions / sec_on:.3f} decisions/s ({sec_on:.1f} s), "
          f"ratio {sec_off / sec_on:.2f}x")
    print(f"  CPU time of this process: off {cpu['off']:.1f} s, {cpu['off2']:.1f} s, on {cpu['on']:.1f} s, "
          f"ratio {cpu_off / cpu['on']:.2f}x")
    on, off = caches["on"], caches["off"]
    print(f"  prompt tokens run through the model: off {off.prefilled_tokens:,} of {off.prompt_tokens:,} "
          f"({off.prompts} prefills), on {on.prefilled_tokens:,} of {on.prompt_tokens:,} ({on.hits}/{on.prompts} "
          f"prefills reused a cached prefix, {on.reused_tokens / max(1, on.prompt_tokens):.0%} of the tokens)")
    pairs = [(a, b) for first in ("off", "off2") for a, b in zip(actions(runs[first][2]), actions(runs["on"][2]))]
    print(f"  identical actions cache off vs on: {sum(a == b for a, b in pairs)}/{len(pairs)} "
          "(both off runs against the on run)")
    if half is not None:
        sec_half, records = runs["bf16"][1], runs["bf16"][2]
        same = sum(a == b for a, b in zip(actions(runs["on"][2]), actions(records)))
        print(f"  bfloat16 weights + prompt cache: {decisions / sec_half:.3f} decisions/s ({sec_half:.1f} s), "
              f"ratio {sec_off / sec_half:.2f}x against float32 cache off (CPU time {cpu_off / cpu['bf16']:.2f}x); "
              f"actions equal to float32: {same}/{decisions} (not the same model: rounding changes answers)")
        print_accuracy("bfloat16 ", records)
    return runs["on"][2]


def compare_batching(label, source, n, questions, **kwargs):
    """The constrained decoder one turn at a time (each request its own forward and every free answer
    line decoded to its end, as before batching), batched (a lockstep round's turns advance together;
    free lines cut once hopeless; the prompt cache grown to hold the round), one at a time again (its time is the mean of the two): decisions/s,
    the ratio, CPU time, tokens through the model, identical actions. Returns the batched run's records."""
    from agile.agents.prompt_cache import PromptKVCache

    decoder = source.policy.constrained
    runs, cpu, caches = {}, {}, {}
    for name in ("alone", "batched", "alone2"):
        # One at a time is the path before batching: every free answer line decoded to its end.
        decoder.batched = decoder.cut_lines = decoder.fit_cache = name == "batched"
        decoder.cache = caches[name] = PromptKVCache(decoder.model, CACHE_TOKENS)  # each run starts cold
        runs[name] = timed(source, source.agent(), n, questions, 0, True, **kwargs)
        cpu[name] = timed.cpu_seconds
    decoder.batched = decoder.cut_lines = decoder.fit_cache = True
    decisions = sum(len(rows) for rows in runs["batched"][2])
    sec_alone, sec_batched = (runs["alone"][1] + runs["alone2"][1]) / 2, runs["batched"][1]
    cpu_alone = (cpu["alone"] + cpu["alone2"]) / 2
    print(f"{label}: one turn at a time {decisions / sec_alone:.3f} decisions/s ({runs['alone'][1]:.1f} s, "
          f"{runs['alone2'][1]:.1f} s), batched {decisions / sec_batched:.3f} decisions/s ({sec_batched:.1f} s), "
          f"ratio {sec_alone / sec_batched:.2f}x")
    print(f"  CPU time of this process: one at a time {cpu['alone']:.1f} s, {cpu['alone2']:.1f} s, batched "
          f"{cpu['batched']:.1f} s, ratio {cpu_alone / cpu['batched']:.2f}x")
    for name in ("alone", "batched"):
        c = caches[name]
        print(f"  {name}: prompt tokens run {c.prefilled_tokens + c.start_tokens:,} of {c.prompt_tokens:,} "
              f"({c.start_tokens:,} as shared starts)")
    pairs = [(a, b) for first in ("alone", "alone2") for a, b in zip(actions(runs[first][2]), actions(runs["batched"][2]))]
    same = sum(a == b for a, b in pairs)
    print(f"  identical actions one at a time vs batched: {same}/{len(pairs)} (both unbatched runs against the "
          "batched run)")
    if same < len(pairs):
        changed = [(a, b) for a, b in pairs if a != b][:3]
        print(f"  first differing actions (one at a time -> batched): {changed}")
    return runs["batched"][2]


def breakdown(label, source, n, questions, **kwargs) -> None:
    """One more run with CPU timers around the prompt prefills, the candidate scoring and the free
    decoding of the constrained decoder (batched or not, as the decoder is set)."""
    from agile.agents.prompt_cache import PromptKVCache
    from agile.executor import constrained

    decoder = source.policy.constrained
    decoder.cache = cache = PromptKVCache(decoder.model, CACHE_TOKENS)
    spent = {"prefill": 0.0, "score": 0.0, "decode": 0.0, "score_calls": 0, "candidates": 0, "decode_calls": 0,
             "tokens": 0, "capped": 0, "rows": 0}
    depth = {"prefill": 0}
    originals = {"prefill": cache.prefill, "prefill_many": cache.prefill_many,
                 "score_continuations": constrained.score_continuations, "score_many": constrained.score_many,
                 "greedy_continue": constrained.greedy_continue}

    def timed_prefill(method):
        def run(*args, **kw):
            depth["prefill"] += 1
            start = time.process_time()
            try:
                return originals[method](*args, **kw)
            finally:
                depth["prefill"] -= 1
                if depth["prefill"] == 0:  # prefill_many calls prefill: count the outer call only
                    spent["prefill"] += time.process_time() - start
        return run

    def timed_score(name):
        def run(model, *args):
            start = time.process_time()
            scores = originals[name](model, *args)
            spent["score"] += time.process_time() - start
            spent["score_calls"] += 1
            spent["candidates"] += len(args[-1]) if name == "score_continuations" else sum(len(r[2]) for r in args[0])
            return scores
        return run

    def timed_decode(model, rows, stops, eos, max_new_tokens, *args, **kw):
        start = time.process_time()
        outputs = originals["greedy_continue"](model, rows, stops, eos, max_new_tokens, *args, **kw)
        spent["decode"] += time.process_time() - start
        spent["decode_calls"] += 1
        spent["rows"] += len(rows)
        ids = outputs[0] if isinstance(outputs, tuple) else outputs
        spent["tokens"] += sum(map(len, ids))
        spent["capped"] += sum(len(o) == max_new_tokens for o in ids)
        return outputs

    cache.prefill, cache.prefill_many = timed_prefill("prefill"), timed_prefill("prefill_many")
    constrained.score_continuations, constrained.score_many = timed_score("score_continuations"), timed_score("score_many")
    constrained.greedy_continue = timed_decode
    try:
        timed(source, source.agent(), n, questions, 0, True, **kwargs)
    finally:
        constrained.score_continuations, constrained.score_many = (originals["score_continuations"],
                                                                   originals["score_many"])
        constrained.greedy_continue = originals["greedy_continue"]
    computed = cache.prefilled_tokens + cache.start_tokens
    print(f"{label}: CPU {timed.cpu_seconds:.1f} s: prefill {spent['prefill']:.1f} s ({cache.prompts} prompts, "
          f"{computed:,} of {cache.prompt_tokens:,} tokens computed, "
          f"{computed / max(spent['prefill'], 1e-9):.0f} tokens/s), scoring {spent['score']:.1f} s "
          f"({spent['score_calls']} calls, {spent['candidates']} candidates), free decoding {spent['decode']:.1f} s "
          f"({spent['decode_calls']} calls, {spent['rows']} rows, {spent['tokens']} tokens, {spent['capped']} ran "
          f"to the {decoder.max_new_tokens}-token cap)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="ProductQA root (default: the generated catalog)")
    parser.add_argument("--sim-episodes", type=int, default=512, help="simulator episodes (8 questions each)")
    parser.add_argument("--llm-episodes", type=int, default=8)
    parser.add_argument("--questions", type=int, default=4, help="questions per LLM episode")
    parser.add_argument("--model", default="smollm2", help="the LLM policy (a name, folder, or SFT / PPO output)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="longest free line of a turn (EnvSpec's)")
    parser.add_argument("--memory", choices=MEMORIES, default="embedding", help="how the executor's memory retrieves")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--breakdown", action="store_true",
                        help="one more run per decoding path timing prefill, scoring and decoding")
    parser.add_argument("--cache-ablation", action="store_true",
                        help="also the prompt cache off / on / off comparison (one turn at a time)")
    parser.add_argument("--device", default=None, help="where the LLM runs (default: GPU when there is one)")
    parser.add_argument("--bf16", action="store_true",
                        help="also bfloat16 weights with the cache (not the same outputs)")
    args = parser.parse_args(argv)
    if args.data is None:
        from agile.envs.catalog_generator import default_catalog_dir

        args.data = str(default_catalog_dir(seed=0))
    kwargs = {"budget": 2, "explore_p": 0.3, "rng_seed": 0}

    if args.sim_episodes > 0:
        source = ColdSource(args.data, args.memory)
        print(f"data: {args.data} (test split, {len(source.group_names)} groups), memory {args.memory}")
        simulator = SimulatorAgent(memory_boost=0.1)
        compare(f"simulator, {args.sim_episodes} episodes x 8 questions", source, simulator, args.sim_episodes, 8,
                **kwargs)
        cf = timed(source, simulator, max(args.sim_episodes // 4, 1), 8, 0, True, counterfactual=True, **kwargs)
        print(f"simulator with counterfactuals: {cf[0]:,.1f} decisions/s ({cf[1]:.1f} s)")

    if args.llm_episodes > 0:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        print(f"torch threads: {torch.get_num_threads()}")
        start = time.perf_counter()
        source = ColdSource(args.data, args.memory, measured_policy(args.model, args.max_new_tokens, device=args.device),
                            args.model)
        print(f"{args.model} loaded in {time.perf_counter() - start:.1f} s on {source.policy.model.device}")
        print(f"data: {args.data} (test split, {len(source.group_names)} groups), memory {args.memory}")
        half = ColdSource(args.data, args.memory, measured_policy(args.model, args.max_new_tokens, "bfloat16", args.device),
                          args.model) if args.bf16 else None
        label = f"{args.model} constrained, {args.llm_episodes} episodes x {args.questions} questions"
        records = compare_batching(label, source, args.llm_episodes, args.questions, **kwargs)
        if half is not None:
            compare_batching(f"{label}, bfloat16", half, args.llm_episodes, args.questions, **kwargs)
        if args.cache_ablation:
            for which in (source, half):
                if which is not None:
                    decoder = which.policy.constrained
                    decoder.batched = decoder.cut_lines = decoder.fit_cache = False
            compare_prompt_cache(label + ", one turn at a time", (source, half), args.llm_episodes, args.questions,
                                 **kwargs)
        if args.breakdown:
            for name, which in (("float32", source), ("bfloat16", half)):
                for batched in (False, True):
                    if which is not None:
                        decoder = which.policy.constrained
                        decoder.batched = decoder.cut_lines = decoder.fit_cache = batched
                        breakdown(f"  where the time goes, {name}, {'batched' if batched else 'one turn at a time'}",
                                  which, args.llm_episodes, args.questions, **kwargs)
        print_accuracy("", records)


if __name__ == "__main__":
    main()
