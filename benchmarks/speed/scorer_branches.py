"""The gate's PRM scorer on a sweep's branching plays: kept prefix caches against none, same plays, one run.

    python benchmarks/speed/scorer_branches.py                                  # tiny model
    python benchmarks/speed/scorer_branches.py --model smollm2 --layers 8       # the main job's PRM backbone

A sweep plays each held-out episode once per method and budget; the plays agree up to their first different
decision, so together they form a tree per episode. Here every path of that tree is played (at each step the
logged action or ``[SeekAdvice]``: 2^steps plays an episode, as many episode ids), one path after another, by
``prm.scoring.scorer.PrmScorer`` with its memo on, as the sweep's gates use it: once keeping no prefix caches
(``prefix_bytes=0``: a miss after memo hits feeds the shared trunk again) and once with the default. Printed:
the tokens the backbone read, the seconds, the ratios, and the largest score difference (the two must agree).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time

import torch

from agile.protocol import Observation
from prm.data.episodes import episodes_of
from prm.data.synthetic import synthetic_frame
from prm.scoring.scorer import PrmScorer
from prm.verifiers.model import ProcessRewardModel


def play_tree(prm, episodes, prefix_bytes: int | None) -> tuple[float, int, list[float]]:
    """Seconds, tokens fed and every score of playing each episode's whole tree of plays."""
    scorer = PrmScorer(prm) if prefix_bytes is None else PrmScorer(prm, prefix_bytes=prefix_bytes)
    scores = []
    start = time.perf_counter()
    for index, (states, actions, *_) in enumerate(episodes):
        for path in itertools.product((False, True), repeat=len(states)):
            episode_id = f"e{index}-" + "".join("h" if helped else "a" for helped in path)
            for step, (state, helped) in enumerate(zip(states, path)):
                observation = Observation(episode_id, "bench", f"t{index}", step, state, len(states), {})
                scores.append(scorer.score(observation))
                scorer.record_action(observation, "[SeekAdvice]" if helped else actions[step])
            scorer.end_episode(episode_id)
    return time.perf_counter() - start, scorer.fed_tokens, scores


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="backbone: tiny, smollm2, a HF id or a folder")
    parser.add_argument("--layers", type=int, default=None, help="keep the first that many decoder layers")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4, help="decision points an episode (2^steps plays each)")
    parser.add_argument("--words-per-state", type=int, default=90, help="filler words in each state text")
    args = parser.parse_args(argv)

    prm = ProcessRewardModel.create(args.model, head="value", tag_after="state", layers=args.layers)
    torch.nn.init.normal_(prm.head.linear.weight, std=0.1)
    frame = synthetic_frame(episodes=args.episodes, steps=args.steps, words_per_state=args.words_per_state, seed=0)
    _, episodes = episodes_of(frame)
    play_tree(prm, episodes[:1], 0)  # warm-up (first-call allocations)
    none_s, none_fed, none_scores = play_tree(prm, episodes, 0)
    kept_s, kept_fed, kept_scores = play_tree(prm, episodes, None)
    diff = max(abs(a - b) for a, b in zip(none_scores, kept_scores))
    print(f"model {args.model} (layers {args.layers or 'all'}), {platform.processor() or 'cpu'}, "
          f"{torch.get_num_threads()} threads; {args.episodes} episodes x {2 ** args.steps} plays x {args.steps} steps")
    print(f"{'':>20} {'tokens fed':>10} {'seconds':>8}")
    print(f"{'no prefix caches':>20} {none_fed:>10} {none_s:>8.2f}")
    print(f"{'kept prefix caches':>20} {kept_fed:>10} {kept_s:>8.2f}")
    print(f"ratio (none / kept): tokens {none_fed / kept_fed:.2f}x, time {none_s / kept_s:.2f}x; max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
