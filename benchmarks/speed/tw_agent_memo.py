"""TextWorld's LLM agent on a sweep's plays: its score memo against none, the same plays, one run.

    python benchmarks/speed/tw_agent_memo.py                      # the embedded SmolLM2, 4 held-out games
    python benchmarks/speed/tw_agent_memo.py --model tiny         # a tiny random model (plumbing only)

A sweep plays every held-out game once per method and budget with one base agent. ``TextWorldLLMAgent`` scores a
state's admissible commands as a pure function of its prompt, and a game's state text holds no history, so those
plays meet the same states again. Here one agent plays the sweep's budget-bound gates on the same games (``never``,
``first_k`` and ``random`` at C = 1..3, ``always``), once keeping no scores (``memo=0``) and once with the default
memo. Printed: the prompts the model scored, the seconds, their ratios, and whether every play chose the same moves.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from agile.agents.textworld_agents import TextWorldLLMAgent
from agile.envs.textworld_env import make_episodes
from helper.gates.simple import AlwaysGate, FirstKGate, NeverGate, RandomGate
from agile.models import load_causal_lm
from agile.rollout import run_episodes


def sweep_gates(budgets: list[int]) -> list[tuple[str, object, int]]:
    """The budget-bound gates a sweep plays: (label, gate, budget)."""
    gates = [("never", NeverGate(0), 0), ("always", AlwaysGate(None), 99)]
    for c in budgets:
        gates += [(f"first_k C={c}", FirstKGate(c), c), (f"random C={c}", RandomGate(0.25, c, seed=c), c)]
    return gates


def play_sweep(agent, games: int, budgets: list[int]) -> tuple[float, list[list[str]]]:
    """Seconds and every play's moves, each gate on fresh episodes of the same held-out games."""
    moves = []
    start = time.perf_counter()
    for _, gate, budget in sweep_gates(budgets):
        episodes = make_episodes(games, split="test", seed=1000, n_games=games)
        records = run_episodes(episodes, agent, gate=gate, budget=budget, rng_seed=1000)
        moves += [[r.action_text for r in rows] for rows in records]
    return time.perf_counter() - start, moves


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="the agent's model: smollm2, tiny, a HF id or a folder")
    parser.add_argument("--games", type=int, default=4, help="held-out games, each played once per gate")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)

    lm = load_causal_lm(args.model, device="cpu", seed=0, dtype=getattr(torch, args.dtype))
    none, kept = TextWorldLLMAgent(args.model, lm=lm, memo=0), TextWorldLLMAgent(args.model, lm=lm)
    none_s, none_moves = play_sweep(none, args.games, args.budgets)
    kept_s, kept_moves = play_sweep(kept, args.games, args.budgets)
    plays = len(sweep_gates(args.budgets)) * args.games
    print(f"model {args.model} ({args.dtype}), {platform.processor() or 'cpu'}, {torch.get_num_threads()} threads; "
          f"{args.games} held-out games x {len(sweep_gates(args.budgets))} gates = {plays} plays, "
          f"{sum(map(len, none_moves))} decisions")
    print(f"{'':>10} {'prompts scored':>14} {'seconds':>8}")
    print(f"{'no memo':>10} {none.scored:>14} {none_s:>8.1f}")
    print(f"{'memo':>10} {kept.scored:>14} {kept_s:>8.1f}")
    print(f"ratio (none / memo): prompts {none.scored / max(kept.scored, 1):.2f}x, time {none_s / kept_s:.2f}x; "
          f"same moves in every play: {none_moves == kept_moves}")


if __name__ == "__main__":
    main()
