"""Which model is worth calling as help on TextWorld: each model alone on the same held-out games, and its one-step
accuracy on the expert's own path.

    python benchmarks/agents/textworld_models.py --models smollm2 gemma3-270m --games 8 --seeds 0 1

A stronger-model kind of help (``--help-kinds MODEL:PRICE``) is worth its price only where the model picks better
moves than the base agent. Per model (``TextWorldLLMAgent``, ranking the admissible commands, in bf16 where the CPU
multiplies it natively): the success of the model playing every move of the held-out games (``never`` for the base
agent, ``always`` for a help that is called at every step), and its accuracy at the states of the expert's
walkthrough (the move it ranks first is the expert's): the rate at which one call of that help fixes a step. Same
games, same seeds for every model (the held-out games of ``helpgate pipeline --env textworld``'s sweep).
"""

from __future__ import annotations

import argparse
import time

import torch

from agile.agents.textworld_agents import TextWorldLLMAgent
from agile.envs.textworld_env import TextWorldSource
from agile.models import native_bf16


def play(agent: TextWorldLLMAgent, episode) -> float:
    while not episode.done:
        (action,) = agent.act([episode.observe()])
        episode.step(action)
    return float(episode.success())


def expert_path_accuracy(agent: TextWorldLLMAgent, episode) -> tuple[int, int]:
    """(moves equal to the expert's, states) along the expert's walkthrough."""
    right = total = 0
    while not episode.done:
        observation = episode.observe()
        expert = episode.expert_action()
        (action,) = agent.act([observation])
        right += int(action.text.strip() == expert.text.strip())
        total += 1
        episode.step(expert)
    return right, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3-270m"])
    parser.add_argument("--games", type=int, default=8, help="held-out games a seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--quest-lengths", type=int, nargs="+", default=[3, 4, 5, 6, 7, 8])
    args = parser.parse_args()
    dtype = torch.bfloat16 if native_bf16() else torch.float32
    source = TextWorldSource("test", args.games, tuple(args.quest_lengths))
    print(f"{len(args.seeds)} seed(s) x {args.games} held-out games, quest lengths {args.quest_lengths}, {dtype}")
    print(f"{'model':<14} {'success alone':>13} {'expert-path accuracy':>21} {'seconds':>8}")
    for name in args.models:
        start = time.perf_counter()
        agent = TextWorldLLMAgent(name, dtype=str(dtype).removeprefix("torch."))
        wins, right, states = [], 0, 0
        for seed in args.seeds:
            for g in range(args.games):
                wins.append(play(agent, source.episode(g, seed)))
                r, t = expert_path_accuracy(agent, source.episode(g, seed))
                right, states = right + r, states + t
        print(f"{name:<14} {sum(wins) / len(wins):13.3f} {right / states:14.3f} ({right}/{states}) "
              f"{time.perf_counter() - start:8.0f}", flush=True)


if __name__ == "__main__":
    main()
