"""Logged chains whose episode succeeds only if every step does: a slip is carried to the end without ending it."""

import numpy as np
import polars as pl

HORIZON, RISKY, SLIP = 4, 0.5, 0.7
"""Each step is risky with probability RISKY; the base agent slips on a risky step with probability SLIP."""
RISKY_SCORE, SAFE_SCORE = 0.2, 0.9


def chain_rows(seed: int, episodes: int, explore: float = 0.4, carried: bool = True) -> pl.DataFrame:
    """Logged chains under random interventions (any number): a slip is carried to the end (``carried``) or, as on
    a question-by-question env, only that step fails (success the mean reward)."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(episodes):
        kept = []
        for t in range(HORIZON):
            risky = rng.random() < RISKY
            helped = bool(rng.random() < explore)
            right = helped or not (risky and rng.random() < SLIP)
            kept.append({"episode_id": f"e{e}", "step": t, "intervened": helped, "budget_left": HORIZON,
                         "reward": float(right), "done": t == HORIZON - 1,
                         "prm_score": RISKY_SCORE if risky else SAFE_SCORE})
        rewards = [r["reward"] for r in kept]
        success = float(all(rewards)) if carried else float(np.mean(rewards))
        rows += [r | {"success": success} for r in kept]
    return pl.DataFrame(rows)
