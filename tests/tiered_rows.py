"""Logged rows of tiered help on the rapids (``examples.tiered_rapids``), and the example's cue as a scorer: what
the tiered solve, gate and server tests read. No PRM is needed: the risk word is the score (``risk_score``)."""

from __future__ import annotations

import polars as pl

from agile.seeding import stable_uniform
from examples.tiered_rapids import HORIZON, KINDS, make_agent, make_episodes, make_helpers, risk_score

PRICES = {kind: float(help.price) for kind, help in KINDS.items()}


def rapids_rows(count: int, seed: int = 0, explore_p: float = 0.5) -> pl.DataFrame:
    """One row per decision point: a uniformly drawn kind called with probability ``explore_p`` (no budget), the
    row naming it (``help_kind``, "" where the agent acted) and its price (``help_cost``)."""
    agent, helps, kinds = make_agent(), make_helpers(), list(KINDS)
    rows = []
    for episode in make_episodes("train", count, seed):
        first = len(rows)
        while not episode.done:
            obs = episode.observe()
            called = stable_uniform(seed, obs.episode_id, obs.step, "explore") < explore_p
            kind = kinds[int(stable_uniform(seed, obs.episode_id, obs.step, "kind") * len(kinds))] if called else ""
            action = (helps[kind] if kind else agent).act([obs])[0]
            result = episode.step(action)
            rows.append({"episode_id": obs.episode_id, "step": obs.step, "state_text": obs.state_text,
                         "action_text": action.text, "intervened": bool(kind), "help_kind": kind,
                         "help_cost": PRICES[kind] if kind else 0.0, "budget_left": HORIZON, "reward": result.reward,
                         "done": result.done, "explore_p": explore_p, "prm_score": risk_score(obs.state_text)})
        for row in rows[first:]:
            row["success"] = float(episode.success())
    return pl.DataFrame(rows)


class RiskScorer:
    """The example's own cue as the gate's score: the risk word read from the state text (what a PRM would learn)."""

    decide_after = "state"

    def score(self, observation) -> float:
        return risk_score(observation.state_text)


def play(gate, count: int, seed: int = 7):
    """Episodes of the true river played with the gate choosing the help: per episode (success, cost, calls)."""
    agent, helps, out = make_agent(), make_helpers(), []
    for episode in make_episodes("test", count, seed):
        cost, calls = 0.0, {}
        while not episode.done:
            obs = episode.observe()
            kind = gate.choose(obs)
            if kind is not None:
                cost += PRICES[kind]
                calls[kind] = calls.get(kind, 0) + 1
            episode.step((helps[kind] if kind else agent).act([obs])[0])
        out.append((float(episode.success()), cost, calls))
        gate.end_episode(obs.episode_id)
    return out
