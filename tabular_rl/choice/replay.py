"""A gate replayed on logged episodes whose decisions do not change what comes next.

    outcome = replay(episodes, decide, budget=2)      # success and interventions per episode

Where every logged row carries the base agent's own outcome at that decision whether or not it was overruled
(ProductQA decided after the proposal: ``proposal_reward``), and a decision changes nothing later (each question is
its own), any gate over (step, score, budget left) can be played on the logged episodes with no model at all: keep
the proposal and earn its logged outcome, or intervene and earn what an intervention earns. The budget is counted
per episode exactly as a live gate counts it. ``decide(step, score, budget_left)`` answers for a whole step of
episodes at once (numpy arrays in, a boolean array out), so a replay costs one call per step.

``ReplayEpisodes.from_rows`` builds the arrays from logged rows; ``replayable`` says whether rows allow it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

Decide = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""``decide(step, score, budget_left) -> intervene`` for the rows of one step (arrays of one length)."""


@dataclass
class ReplayEpisodes:
    """Logged episodes as flat arrays, one entry per decision, sorted by episode then step."""

    episode: np.ndarray
    """Episode index 0..E-1 per decision."""
    step: np.ndarray
    score: np.ndarray
    base_credit: np.ndarray
    """Success credited to the decision when the base agent's proposal is kept."""
    help_credit: np.ndarray
    """Success credited to the decision when an intervention replaces it."""
    n_episodes: int

    @classmethod
    def from_rows(cls, rows: pl.DataFrame, score: np.ndarray | None = None, base_column: str = "proposal_reward",
                  score_column: str = "prm_score") -> ReplayEpisodes:
        """From logged rows (``episode_id``, ``step``, ``reward``, ``intervened``, the base outcome column):
        success is the mean outcome over an episode's decisions, an intervention earns the mean logged reward of
        the intervened rows (1 where the human answers). ``score``: one value per row of ``rows`` instead of
        ``score_column`` (another gate's score, e.g. a router's)."""
        frame = rows.select("episode_id", "step", "reward", "intervened", base_column).with_columns(
            pl.Series("__score", rows[score_column].cast(pl.Float64).to_numpy() if score is None
                      else np.asarray(score, dtype=np.float64)), pl.int_range(pl.len()).alias("__row"))
        frame = frame.sort("episode_id", "step")
        helped = frame.filter(pl.col("intervened"))["reward"]
        help_value = float(helped.mean()) if helped.len() else 1.0
        episode = frame["episode_id"].rank("dense").cast(pl.Int64).to_numpy() - 1
        length = np.bincount(episode)[episode].astype(np.float64)
        return cls(episode=episode, step=frame["step"].cast(pl.Int64).to_numpy(), score=frame["__score"].to_numpy(),
                   base_credit=frame[base_column].cast(pl.Float64).to_numpy() / length,
                   help_credit=np.full(frame.height, help_value) / length, n_episodes=int(episode.max()) + 1)

    def subset(self, keep_episode: np.ndarray) -> ReplayEpisodes:
        """The episodes whose index has ``keep_episode`` True, renumbered."""
        rows = keep_episode[self.episode]
        new_index = np.cumsum(keep_episode) - 1
        return ReplayEpisodes(new_index[self.episode[rows]], self.step[rows], self.score[rows], self.base_credit[rows],
                              self.help_credit[rows], int(keep_episode.sum()))


@dataclass
class ReplayOutcome:
    success: np.ndarray
    """Per episode."""
    interventions: np.ndarray
    """Per episode."""


def replay(episodes: ReplayEpisodes, decide: Decide, budget: int) -> ReplayOutcome:
    """Play ``decide`` on every logged episode with at most ``budget`` interventions each."""
    left = np.full(episodes.n_episodes, int(budget), dtype=np.int64)
    success = np.zeros(episodes.n_episodes)
    used = np.zeros(episodes.n_episodes, dtype=np.int64)
    for t in np.unique(episodes.step):
        at = np.flatnonzero(episodes.step == t)
        who = episodes.episode[at]
        b = left[who]
        want = np.asarray(decide(np.full(at.size, t), episodes.score[at], b), dtype=bool) & (b > 0)
        success[who] += np.where(want, episodes.help_credit[at], episodes.base_credit[at])
        left[who] -= want
        used[who] += want
    return ReplayOutcome(success, used.astype(np.float64))


def replayable(rows: pl.DataFrame, base_column: str = "proposal_reward") -> bool:
    """Whether ``rows`` log the base agent's outcome at every decision (``base_column`` with no null) and an
    episode's success is the mean reward of its decisions, so that decisions are separate questions."""
    needed = {"episode_id", "reward", "success", "intervened", base_column}
    if not needed <= set(rows.columns) or rows[base_column].null_count():
        return False
    mean = rows.group_by("episode_id").agg(pl.col("reward").mean().alias("m"), pl.col("success").first().alias("s"))
    return bool(np.allclose(mean["m"].to_numpy(), mean["s"].cast(pl.Float64).to_numpy(), atol=1e-9))
