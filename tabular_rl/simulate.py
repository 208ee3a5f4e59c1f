"""Roll out a ``TabularModel`` into logged rows with the offline dataset's columns.

Used to check a solved policy by simulation (every episode's interventions, not just the
mean) and to make synthetic datasets from a known MDP for tests and benchmarks.

The behaviour is either a collection-style ``explore_p`` (intervene with that probability while
budget is left) or a ``Solution`` (its ``intervene_prob`` at the current budget left). The logged
``prm_score`` of state ``s`` is drawn uniformly inside ``[s / S, (s + 1) / S)``, so
``Discretizer(bins=S, binning="uniform")`` maps it back to ``s`` exactly. ``success`` is the
episode's return. All episodes advance together, one vectorized step at a time.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .estimate import TabularModel
from .solution import Solution


def simulate(
    model: TabularModel,
    n_episodes: int,
    *,
    budget: int,
    behaviour: float | Solution = 0.5,
    seed: int = 0,
    reward_noise: float = 0.0,
    grouped: bool = True,
) -> pl.DataFrame:
    """``n_episodes`` episodes as rows (``grouped``: each episode's rows contiguous, else step-major)."""
    rng = np.random.default_rng(seed)
    T, S = model.horizon, model.n_states
    cum = np.cumsum(model.transitions, axis=-1)
    ep = np.arange(n_episodes)
    if model.entries is not None:
        raise ValueError("this model's episodes enter past step 0 (aligned at their ends); use solve_exact / evaluate")
    s = rng.choice(S, size=n_episodes, p=model.start)
    b = np.full(n_episodes, int(budget))
    ret = np.zeros(n_episodes)
    parts = []
    for t in range(T):
        if ep.size == 0:
            break
        if isinstance(behaviour, Solution):
            p = behaviour.intervene_prob(np.full(ep.size, t), s, b)
        else:
            p = np.where(b > 0, float(behaviour), 0.0)
        a = (rng.random(ep.size) < p).astype(np.int64)
        r = model.rewards[t, s, a] + reward_noise * rng.standard_normal(ep.size)
        if t == T - 1:
            nxt = np.full(ep.size, S)
        else:
            # Inverse CDF per row; the min() guards a cumulative sum that ends a hair below 1.
            nxt = np.minimum((rng.random(ep.size)[:, None] >= cum[t, s, a]).sum(1), S)
        done = nxt == S
        parts.append((ep, np.full(ep.size, t), s, a, b, r, done))
        ret[ep] += r
        keep = ~done
        ep, s, b = ep[keep], nxt[keep], (b - a)[keep]
    ep, step, state, action, bl, reward, done = (np.concatenate(x) for x in zip(*parts))
    if grouped:
        order = np.argsort(ep, kind="stable")  # rows were appended step by step, so steps stay sorted
        ep, step, state, action, bl, reward, done = (x[order] for x in (ep, step, state, action, bl, reward, done))
    return pl.DataFrame(
        {
            "episode_id": pl.Series(ep).cast(pl.String),
            "step": step,
            "intervened": action.astype(bool),
            "budget_left": bl,
            "reward": reward,
            "done": done,
            "success": ret[ep],
            "prm_score": (state + rng.random(state.size)) / S,
            "state": state,
        }
    )
