"""Never-ask accuracy of ProductQA's LLM agent, which reads no annotation, on the test groups.

The agent is the AGILE executor with the untuned SmolLM2 policy in constrained decoding
(``agile-constrained``: the function and answer form chosen by the model's log-probabilities,
``agile.executor.constrained``), answering test sessions with no help (budget 0). Episode i of
the test split under --seed is a fixed group and window of questions (``agile.envs.sessions``).

Sessions run in chunks of one episode per group and every question's row is appended to
``<out>/rows.jsonl`` at once, so a run stopped at any time keeps what it did (and resumes after
it). ``report`` prints the Markdown tables: accuracy with a 95% interval that resamples episodes,
per question type, the functions chosen and the answer distribution; where ``rows.jsonl`` holds
rows of other agents (an earlier run's), also the paired differences on the same questions::

    OMP_NUM_THREADS=1 python benchmarks/agents/honest_agent.py agile --out runs/honest --episodes 16
    python benchmarks/agents/honest_agent.py report --out runs/honest

The question type is read only by the report (accuracy per type).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

AGENT = "agile-constrained"
"""The agent's name in rows.jsonl."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def done_keys(path: Path) -> set[tuple[str, str]]:
    if not path.is_file():
        return set()
    return {(r["agent"], r["episode"]) for r in map(json.loads, path.read_text().splitlines())}


def append(path: Path, rows: list[dict]) -> None:
    with path.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def chunks(args, n_groups: int):
    for start in range(0, args.episodes, n_groups):
        yield list(range(start, min(start + n_groups, args.episodes)))


def run_agile(args, out: Path) -> None:
    from agile.executor.episode import AgileSource
    from agile.rollout import run_episodes
    from prm.data.folds import task_type

    source = AgileSource(args.data, "test", model="smollm2", max_new_tokens=args.max_new_tokens,
                         decoding="constrained")
    name = AGENT
    for indices in chunks(args, len(source.group_names)):
        episodes = source.episodes(indices, args.seed, args.questions)
        # Episode ids without the "agile-" prefix, as earlier rows.jsonl files key them (resume, pairing).
        todo = [e for e in episodes if (name, e.episode_id[len("agile-"):]) not in done_keys(out / "rows.jsonl")]
        if not todo:
            continue
        policy = source.policy
        before = len(policy.constrained.choices)
        start = time.perf_counter()
        run_episodes(todo, source.agent())
        choices = policy.constrained.choices[before:]
        rows = []
        for e in todo:
            for r in e.executor.records:
                answer = r.answer
                text = "(gave up)" if answer is None else ", ".join(answer) if isinstance(answer, list) else str(answer)
                rows.append({"agent": name, "episode": e.episode_id[len("agile-"):], "step": r.index,
                             "group": r.group, "type": task_type(r.question_id), "correct": float(r.correct),
                             "function": next((f for f in reversed(r.functions) if f in
                                               ("[SearchProduct]", "[PredictAnswer]", "[SeekAdvice]")), ""),
                             "answer": text, "turns": r.turns})
        append(out / "rows.jsonl", rows)
        append(out / "agile_choices.jsonl", choices)
        log(f"{name} episodes {[e.episode_id for e in todo]}: {len(rows)} questions in "
            f"{time.perf_counter() - start:.0f}s")


def bootstrap(values_by_episode: dict[str, list[float]], seed: int = 0, n: int = 2000) -> tuple[float, float]:
    """95% interval of the mean per question, resampling episodes."""
    keys = list(values_by_episode)
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(n):
        pick = rng.integers(len(keys), size=len(keys))
        values = [v for i in pick for v in values_by_episode[keys[i]]]
        means.append(np.mean(values))
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def report(out: Path) -> str:
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    by_agent: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        by_agent[r["agent"]].append(r)
    # Every agent on the episodes all of them finished, so the rows compare; differences are paired
    # on the same questions.
    names = sorted(by_agent, key=lambda n: (n != AGENT, n))
    common = set.intersection(*({r["episode"] for r in by_agent[n]} for n in names)) if names else set()
    lines = ["| agent | episodes | questions | accuracy [95%] | fact_qa | search_qa | reasoning_qa |",
             "|---|---|---|---|---|---|---|"]
    keyed = {}
    for name in names:
        rs = [r for r in by_agent[name] if r["episode"] in common]
        if not rs:
            continue
        keyed[name] = {(r["episode"], r["step"]): r["correct"] for r in rs}
        per_episode = collections.defaultdict(list)
        for r in rs:
            per_episode[r["episode"]].append(r["correct"])
        low, high = bootstrap(per_episode)
        per_type = []
        for t in ("fact_qa", "search_qa", "reasoning_qa"):
            v = [r["correct"] for r in rs if r["type"] == t]
            per_type.append(f"{np.mean(v):.3f} (n={len(v)})" if v else "-")
        lines.append(f"| {name} | {len(per_episode)} | {len(rs)} | {np.mean([r['correct'] for r in rs]):.3f} "
                     f"[{low:.3f}, {high:.3f}] | "
                     + " | ".join(per_type) + " |")
    if len(keyed) > 1:
        lines += ["", "| paired difference (same questions) | mean [95%, resampling episodes] |", "|---|---|"]
        for i, a in enumerate(keyed):
            for b in list(keyed)[i + 1:]:
                per_episode = collections.defaultdict(list)
                for key, value in keyed[a].items():
                    if key in keyed[b]:
                        per_episode[key[0]].append(value - keyed[b][key])
                low, high = bootstrap(per_episode)
                lines.append(f"| {a} − {b} ({sum(map(len, per_episode.values()))} questions) | "
                             f"{np.mean([v for vs in per_episode.values() for v in vs]):+.3f} "
                             f"[{low:+.3f}, {high:+.3f}] |")
    lines += ["", "| agent | question type | function chosen (share) |", "|---|---|---|"]
    for name in keyed:
        for t in ("fact_qa", "search_qa", "reasoning_qa"):
            rs = [r for r in by_agent[name] if r["episode"] in common and r["type"] == t]
            if not rs:
                continue
            counts = collections.Counter(r["function"] for r in rs)
            shares = ", ".join(f"{k} {v / len(rs):.2f}" for k, v in counts.most_common())
            lines.append(f"| {name} | {t} | {shares} |")
    lines += ["", "| agent | distinct answers | most common answers (share) |", "|---|---|---|"]
    for name in keyed:
        rs = [r for r in by_agent[name] if r["episode"] in common]
        counts = collections.Counter(r["answer"] for r in rs)
        top = ", ".join(f"`{k[:40]}` {v / len(rs):.2f}" for k, v in counts.most_common(4))
        lines.append(f"| {name} | {len(counts)} of {len(rs)} | {top} |")
    choices = out / "agile_choices.jsonl"
    if choices.is_file():
        forms = collections.Counter(json.loads(line)["form"] for line in choices.read_text().splitlines())
        lines += ["", f"{AGENT} turns by answer form: " + ", ".join(f"{k} {v}" for k, v in forms.most_common())]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["agile", "report"], help="agile: run the agent; report: print the tables")
    parser.add_argument("--out", default="runs/honest", help="folder of rows.jsonl")
    parser.add_argument("--data", default=None, help="ProductQA root (default: ../shared/productqa)")
    parser.add_argument("--episodes", type=int, default=16, help="test episodes (spread over the test groups)")
    parser.add_argument("--questions", type=int, default=4, help="questions per episode")
    parser.add_argument("--seed", type=int, default=0, help="which sessions the episodes hold")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="longest query or free answer")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.data is None:
        from agile.envs.productqa import default_productqa_root

        args.data = str(default_productqa_root())
    if args.what == "report":
        print(report(out))
        return
    import torch

    torch.set_num_threads(1)
    (out / f"command_{args.what}.txt").write_text(" ".join(sys.argv) + "\n")
    run_agile(args, out)


if __name__ == "__main__":
    main()
