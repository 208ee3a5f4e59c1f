"""TextWorld environment numbers: generation time, env speed, clone cost, and the headroom a
helper has (simulator base agent: never / always / random interventions) on held-out games.

    python benchmarks/agents/textworld_headroom.py --games 24 --seeds 3
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections import defaultdict

from agile.agents.textworld_agents import TextWorldSimulatorAgent
from agile.envs.textworld_env import TextWorldSource
from agile.protocol import Action
from agile.rollout import run_episodes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--games", type=int, default=24)
    parser.add_argument("--seeds", type=int, default=3, help="episodes (agent seeds) per game")
    parser.add_argument("--fresh-cache", action="store_true", help="time generation in an empty cache")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="tw-bench-") if args.fresh_cache else None
    source = TextWorldSource("test", n_games=args.games, cache_dir=cache)

    # 1. generation (time recorded in each game's meta.json when it was compiled)
    by_length = defaultdict(list)
    t0, c0 = time.perf_counter(), time.process_time()
    for g in range(args.games):
        game = source.game(g, seed=0)  # the held-out games of seed 0, played below
        by_length[game.spec.quest_length].append(game.meta["seconds"])
    print(f"generation: {args.games} games, wall {time.perf_counter() - t0:.1f} s, "
          f"this process CPU {time.process_time() - c0:.1f} s, load avg {os.getloadavg()[0]:.1f}")
    for length, secs in sorted(by_length.items()):
        print(f"  quest length {length}: mean {statistics.mean(secs):.2f} s per game (n={len(secs)})")

    # 2. env speed: random play, agent cost excluded
    rng = random.Random(0)
    steps, wall, cpu = 0, 0.0, 0.0
    starts = []
    for episode in source.episodes(range(args.games), seed=0):
        t = time.perf_counter()
        episode.observe()
        starts.append(time.perf_counter() - t)
        while not episode.done:
            commands = episode.state["admissible_commands"]
            t, c = time.perf_counter(), time.process_time()
            episode.step(Action(rng.choice(commands)))
            episode.observe()
            wall += time.perf_counter() - t
            cpu += time.process_time() - c
            steps += 1
    print(f"env: {steps} random steps, {steps / wall:.0f} steps/s wall, {steps / cpu:.0f} steps/s CPU; "
          f"start+reset {statistics.mean(starts) * 1000:.0f} ms")

    # 3. clone cost (replay on a fresh interpreter) by history length
    episode = source.episode(args.games - 1, seed=0)  # a quest of the longest length
    rng = random.Random(1)
    for target in (0, 10, 20):
        while episode.steps < target and not episode.done:
            episode.step(Action(rng.choice(episode.state["admissible_commands"])))
        t = time.perf_counter()
        for _ in range(5):
            episode.clone().observe()
        print(f"clone + first observe at {episode.steps} moves: {(time.perf_counter() - t) / 5 * 1000:.0f} ms")

    # 4. headroom: success of never / always / random interventions for simulator base agents
    indices = range(args.games * args.seeds)
    budget_all = source.max_horizon
    print(f"\nheadroom on {args.games} held-out games x {args.seeds} seeds = {len(indices)} episodes")
    print("| base p | method | success | interventions / episode | moves / episode |")
    print("|---|---|---|---|---|")
    for p in (0.0, 0.25, 0.5):
        agent = TextWorldSimulatorAgent(p=p, seed=0)
        runs = [("never", 0, None), ("always", budget_all, 1.0)]
        runs += [(f"random {r:.0%}", budget_all, r) for r in (0.1, 0.2, 0.3, 0.5)]
        runs += [(f"random 30%, C={c}", c, 0.3) for c in (1, 2, 4)]
        for name, budget, rate in runs:
            episodes = source.episodes(indices, seed=0)
            t = time.perf_counter()
            records = run_episodes(episodes, agent, budget=budget, explore_p=rate, rng_seed=1)
            success = statistics.mean(e.success() for e in episodes)
            used = statistics.mean(sum(r.intervened for r in rows) for rows in records)
            moves = statistics.mean(len(rows) for rows in records)
            print(f"| {p} | {name} | {success:.3f} | {used:.2f} | {moves:.1f} |  ({time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
