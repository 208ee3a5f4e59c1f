"""Synthetic trajectories with a known answer, for tests, benchmarks and smoke runs.

Each episode's state texts carry a cue word; episodes with the good cue succeed with probability
``p_good``, the others with ``1 - p_good``. A PRM that reads the cue reaches an AUROC near the
Bayes limit, so training can be checked end to end in seconds. Rows follow the full trajectory
schema (every required column), so the frames also pass the dataset validator.
"""

from __future__ import annotations

import numpy as np
import polars as pl

GOOD, BAD = "sunny", "stormy"
_FILLER = [
    "the",
    "agent",
    "looks",
    "at",
    "the",
    "shelf",
    "and",
    "reads",
    "a",
    "label",
    "about",
    "a",
    "product",
    "with",
    "a",
    "price",
    "and",
    "a",
    "brand",
    "name",
    "then",
    "it",
    "checks",
    "the",
    "size",
    "colour",
    "material",
    "and",
    "the",
    "customer",
    "question",
    "once",
    "more",
]


def synthetic_frame(
    episodes: int = 64,
    steps: int | tuple[int, int] = (2, 5),
    words_per_state: int = 12,
    p_good: float = 0.95,
    seed: int = 0,
    env: str = "synthetic",
) -> pl.DataFrame:
    """A trajectory frame; ``steps`` is a fixed count or an inclusive (low, high) range."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(episodes):
        good = bool(rng.random() < 0.5)
        cue = GOOD if good else BAD
        won = bool(rng.random() < (p_good if good else 1 - p_good))
        n = steps if isinstance(steps, int) else int(rng.integers(steps[0], steps[1] + 1))
        for t in range(n):
            filler = " ".join(rng.choice(_FILLER, size=words_per_state))
            rows.append(
                {
                    "episode_id": f"{env}-{seed}-{e:05d}",
                    "step": t,
                    "env": env,
                    "task_id": f"task-{e % 7}",
                    "state_text": f"Weather: {cue}. {filler}",
                    "action_text": f"answer {int(rng.integers(0, 100))}",
                    "actor": "base",
                    "intervened": False,
                    "budget_left": 1,
                    "reward": float(won) if t == n - 1 else 0.0,
                    "done": t == n - 1,
                    "success": float(won),
                    "explore_p": 0.0,
                    "seed": seed,
                }
            )
    return pl.DataFrame(rows).with_columns(
        pl.col("step").cast(pl.Int64), pl.col("budget_left").cast(pl.Int64), pl.col("seed").cast(pl.Int64)
    )
