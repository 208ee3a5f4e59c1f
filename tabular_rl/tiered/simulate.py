"""Roll out a ``TieredModel`` into logged rows, with the columns ``estimate_tiered`` reads.

The behaviour is a ``TieredSolution`` (its table at the current resource state; a Lagrangian
mixture draws its table once per episode) or an exploration probability p: with probability p a
uniformly drawn kind that the episode can still afford is called (collection with random calls of
every kind). The simulator plays what the behaviour says without checking it: each row records the
price paid, so a test can add up what an episode spent and see a table that overspends. The logged
``prm_score`` of state s lies in [s / S, (s + 1) / S), as in ``tabular_rl.simulate``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .mdp import TieredModel
from .resources import Resources
from .solution import TieredSolution


def simulate_tiered(model: TieredModel, resources: Resources, n_episodes: int, *,
                    behaviour: float | TieredSolution = 0.5, seed: int = 0) -> pl.DataFrame:
    """``n_episodes`` episodes as rows, each episode's rows contiguous, steps increasing."""
    rng = np.random.default_rng(seed)
    T, S = model.horizon, model.n_states
    nxt = resources.next_index()
    cum = np.cumsum(model.transitions, axis=-1)
    prices = resources.cost().astype(np.int64)
    ep = np.arange(n_episodes)
    s = rng.choice(S, size=n_episodes, p=model.start)
    r = np.full(n_episodes, resources.full)
    member = np.zeros(n_episodes, dtype=np.int64)
    if isinstance(behaviour, TieredSolution) and len(behaviour.tables) == 2:
        member = (rng.random(n_episodes) >= behaviour.mix).astype(np.int64)
    ret = np.zeros(n_episodes)
    rows = []
    for t in range(T):
        if ep.size == 0:
            break
        if isinstance(behaviour, TieredSolution):
            tables = np.stack(behaviour.tables)
            a = tables[member[ep], t, s, r]
        else:
            affordable = (nxt[1:, r] >= 0).T  # (episodes, K)
            pick = rng.random(ep.size)[:, None] * affordable.sum(1, keepdims=True)
            # The first affordable kind whose running count passes the uniform draw: uniform among them.
            kind = 1 + np.argmax(np.cumsum(affordable, 1) > pick, axis=1)
            call = (rng.random(ep.size) < float(behaviour)) & affordable.any(1)
            a = np.where(call, kind, 0)
        reward = model.rewards[t, s, a]
        if t == T - 1:
            nxt_s = np.full(ep.size, S)
        else:  # inverse CDF per row; the min() guards a cumulative sum that ends a hair below 1
            nxt_s = np.minimum((rng.random(ep.size)[:, None] >= cum[t, s, a]).sum(1), S)
        units_left = resources.states()[r, 0]
        rows.append((ep, np.full(ep.size, t), s, a, units_left, prices[a], reward, nxt_s == S))
        ret[ep] += reward
        # Where a table calls a kind it cannot afford, the resource state would not exist: keep the old one
        # (the row's price still counts, so the overspend shows in the sum of an episode's prices).
        r = np.where(nxt[a, r] >= 0, nxt[a, r], r)
        keep = nxt_s != S
        ep, s, r = ep[keep], nxt_s[keep], r[keep]
    ep, step, state, action, units, paid, reward, done = (np.concatenate(x) for x in zip(*rows))
    order = np.argsort(ep, kind="stable")
    ep, step, state, action, units, paid, reward, done = (
        x[order] for x in (ep, step, state, action, units, paid, reward, done))
    names = np.array([None, *model.kinds], dtype=object)
    return pl.DataFrame({
        "episode_id": pl.Series(ep).cast(pl.String),
        "step": step,
        "intervened": action > 0,
        "help_kind": pl.Series(names[action].tolist(), dtype=pl.String),
        "cost": paid / resources.scale,
        "budget_left": units / resources.scale,
        "reward": reward,
        "done": done,
        "success": ret[ep],
        "prm_score": (state + rng.random(state.size)) / S,
        "state": state,
    })
