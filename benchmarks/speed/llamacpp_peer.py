"""The peer on this CPU: llama.cpp (``llama-cpp-python``) on the very GGUF the embedded package ships, timed on the
constrained agent's own scoring requests beside our torch path, with how often it makes the same choices.

    pip install -e ".[peer]"                 # llama-cpp-python, an sdist: it builds llama.cpp (~20 min on 2 cores)
    python benchmarks/speed/llamacpp_peer.py --data ../shared/productqa --episodes 8 --questions 4

1. The agent plays ``--episodes`` test episodes (batched, as collection does) and every scoring request of its turns
   is recorded: the prompt's token ids, the candidate lines (a function name, a query unit, an answer line) and the
   candidate torch chose. Free decoding is left out (a line's greedy tokens; about a seventh of the time).
2. The requests are replayed one at a time, session by session, through (a) the torch path one request at a time
   (``ConstrainedDecoder._serve_alone`` with a fresh prompt cache) and (b) llama.cpp, which keeps one sequence and
   reuses its longest common start with the previous request (as its server's slots do), scoring each candidate
   after the prompt from its logits. Same ids: the tokenizer is the GGUF's in both.
3. Printed: seconds and prompt + candidate tokens a second of each, the ratio, and the share of requests where
   llama.cpp's most probable candidate is torch's (Q4_1 weights are the same numbers in both; llama.cpp also
   rounds the activations to 8 bits in its products, so near-ties can go the other way).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def record(data: str, episodes: int, questions: int, memory: str):
    """The agent's scoring requests (prompt, lines, torch's pick), grouped by session in play order."""
    from agile.executor import constrained
    from agile.executor.episode import AgileSource
    from agile.rollout import run_episodes

    source = AgileSource(data, "test", model="smollm2", decoding="constrained", memory=memory)
    decoder = source.policy.constrained
    seen: list[tuple[int, list[int], list[list[int]]]] = []
    serve = decoder._serve_batched

    def recording(requests):
        answers = serve(requests)
        for request, answer in zip(requests, answers):
            if isinstance(request, constrained._Score) and request.state is None:
                seen.append((len(seen), list(request.prompt), [list(x) for x in request.lines],
                             int(np.argmax(answer[0]))))
        return answers

    decoder._serve_batched = recording
    run_episodes(source.episodes(range(episodes), 0, questions), source.agent(), budget=2, explore_p=0.3, rng_seed=0)
    # Session by session: a request's prompt starts with its session's system text; keep play order within.
    seen.sort(key=lambda r: (r[1][:64], r[0]))
    return source, [(p, lines, pick) for _, p, lines, pick in seen]


def torch_alone(source, requests):
    from agile.agents.prompt_cache import PromptKVCache
    from agile.executor.constrained import _Score

    decoder = source.policy.constrained
    decoder.cache = PromptKVCache(decoder.model, 16_384)
    start = time.perf_counter()
    picks = [int(np.argmax(decoder._serve_alone(_Score(p, lines))[0])) for p, lines, _ in requests]
    return time.perf_counter() - start, picks


def llama_cpp_alone(gguf: str, requests, threads: int, context: int):
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=context, n_batch=512, logits_all=True, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    start = time.perf_counter()
    picks = []
    for prompt, lines, _ in requests:
        common = 0
        held = llm.input_ids[:llm.n_tokens]
        while common < min(len(held), len(prompt) - 1) and held[common] == prompt[common]:
            common += 1
        llm.n_tokens = common
        llm.eval(prompt[common:])
        first = _log_softmax(np.array(llm.scores[len(prompt) - 1]))
        scores = []
        for line in lines:
            score = float(first[line[0]])
            if len(line) > 1:
                llm.n_tokens = len(prompt)
                llm.eval(line[:-1])
                rows = np.array(llm.scores[len(prompt):len(prompt) + len(line) - 1])
                log_probs = rows - np.logaddexp.reduce(rows, axis=1, keepdims=True)
                score += float(sum(log_probs[j, line[j + 1]] for j in range(len(line) - 1)))
            scores.append(score)
        picks.append(int(np.argmax(scores)))
        llm.n_tokens = len(prompt)  # the next request reuses the prompt, not a candidate
    return time.perf_counter() - start, picks


def _log_softmax(row: np.ndarray) -> np.ndarray:
    return row - np.logaddexp.reduce(row)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="ProductQA root (default: the generated catalog)")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--memory", default="lexical", choices=("lexical", "embedding"))
    parser.add_argument("--threads", type=int, default=2, help="threads of each engine")
    parser.add_argument("--context", type=int, default=8192, help="llama.cpp's context length")
    args = parser.parse_args(argv)
    import torch

    from agile.models import _GGUF_FILE, _embedded_gguf_dir

    torch.set_num_threads(args.threads)
    if args.data is None:
        from agile.envs.catalog_generator import default_catalog_dir

        args.data = str(default_catalog_dir(seed=0))
    source, requests = record(args.data, args.episodes, args.questions, args.memory)
    tokens = sum(len(p) + sum(map(len, lines)) for p, lines, _ in requests)
    print(f"{len(requests)} scoring requests of {args.episodes} episodes x {args.questions} questions "
          f"({args.data}), {sum(len(lines) for _, lines, _ in requests)} candidates, {tokens:,} tokens asked")
    ours, ours_picks = torch_alone(source, requests)
    peer, peer_picks = llama_cpp_alone(str(_embedded_gguf_dir() / _GGUF_FILE), requests, args.threads, args.context)
    recorded = [pick for _, _, pick in requests]
    print(f"torch float32, one request at a time: {ours:.1f} s; llama.cpp Q4_1: {peer:.1f} s; "
          f"llama.cpp / torch speed {ours / peer:.2f}x ({args.threads} threads each)")
    print(f"same choice: torch one at a time vs batched {np.mean(np.equal(ours_picks, recorded)):.3f}, llama.cpp vs "
          f"torch {np.mean(np.equal(peer_picks, recorded)):.3f} of {len(requests)} requests")


if __name__ == "__main__":
    main()
