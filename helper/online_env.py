"""The helpgate episode loop as a ``gymnasium`` environment, for the online deep-RL baseline.

    genv = HelpEnv(env, names, scale, max_budget=3, episode_seed=500)   # env: helper.environment.Environment
    obs, _ = genv.reset(seed=0)
    obs, reward, terminated, truncated, info = genv.step(1)              # 1: intervene, 0: let the agent act

One gymnasium episode is one helpgate episode of the training split (a fresh one at every reset,
indices ``rank, rank + stride, ...`` of seed ``episode_seed``, so parallel copies never share one).

- **Budget.** At reset a budget C is drawn uniformly from 1..max_budget; ``budget_left`` is in the
  observation, so one policy serves every C (as the helper does).
- **Observation.** The helper's feature row (``helper.features.observation_features``: the PRM
  score when a scorer is given, step, horizon, progress, steps left, budget left, budget per step,
  the observation's numeric features), divided by fixed per-feature scales; a missing value
  (a failed PRM score, an absent key) is 0.
- **Action.** Discrete(2). A decision point with no budget left is not a decision: the env plays
  it (and every later one) with the base agent inside ``step``, so the policy is only asked where
  intervening is possible and no action ever needs masking.
- **Reward.** The change of ``episode.success()`` over the step, so the undiscounted return is
  exactly the episode's success (ProductQA: each answered question adds reward / horizon;
  TextWorld: 1 at the winning move).
- **Calls.** Every intervention is counted in ``calls`` (``strong`` or ``human``, by the actor that
  answered). Each decision goes through ``agile.rollout.decide``, the loop's own per-step function
  (tool rounds included), one episode at a time: an LLM base agent is not batched across episodes
  here as it is in ``run_episodes``, so an LLM run costs about one agent call per decision.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

from agile.protocol import STRONG
from agile.rollout import decide
from helper.features import observation_features


class HelpEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, env, names: list[str], scale: list[float], max_budget: int, episode_seed: int,
                 scorer=None, split: str = "train", rank: int = 0, stride: int = 1):
        if max_budget < 1:
            raise ValueError(f"max_budget must be >= 1 for online RL (budgets are drawn from 1..max_budget), "
                             f"got {max_budget}.")
        self.env = env
        self.names = list(names)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.max_budget = int(max_budget)
        self.episode_seed = int(episode_seed)
        self.scorer = scorer
        self.split = split
        self.next_index = int(rank)
        self.stride = int(stride)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(len(self.names),), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.calls = {"strong": 0, "human": 0}
        self.episodes_played = 0
        self.episode = None
        self.budget_left = 0

    # -- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.budget = int(self.np_random.integers(1, self.max_budget + 1))
        self.budget_left = self.budget
        self.episode = self.env.episodes(1, seed=self.episode_seed, start=self.next_index, split=self.split)[0]
        self.next_index += self.stride
        self.episodes_played += 1
        # A fresh episode has at least one decision and budget >= 1: the first one is ours to make.
        return self._observe(), {"budget": self.budget}

    def step(self, action):
        if self.episode is None or self.episode.done:
            raise RuntimeError("HelpEnv.step called on a finished episode: call reset() first.")
        before = float(self.episode.success())
        self._play(bool(int(action)) and self.budget_left > 0)
        while not self.episode.done and self.budget_left == 0:
            self._play(False)
        reward = float(self.episode.success()) - before
        terminated = bool(self.episode.done)
        info = {"budget": self.budget}
        if terminated:
            info["success"] = float(self.episode.success())
            if self.scorer is not None and hasattr(self.scorer, "end_episode"):
                self.scorer.end_episode(self.episode.episode_id)
            obs = np.zeros(len(self.names), dtype=np.float32)
        else:
            obs = self._observe()
        return obs, reward, terminated, False, info

    # -- internals --------------------------------------------------------------------------------
    def _play(self, intervene: bool) -> None:
        """One decision point with the strong actor (``None``: the human) or the base agent."""
        observation = self.episode.observe()
        decision = decide([self.episode], [self.env.strong if intervene else self.env.base])[0]
        if intervene:
            self.calls["strong" if decision.actor == STRONG else "human"] += 1
            self.budget_left -= 1
        if self.scorer is not None and hasattr(self.scorer, "record_action"):
            self.scorer.record_action(observation, decision.action_text)

    def _observe(self) -> np.ndarray:
        observation = self.episode.observe()
        score = score_or_nan(self.scorer, observation)
        row = observation_features(observation, self.budget_left, score, self.names)[0]
        return scaled(row, self.scale)


def score_or_nan(scorer, observation) -> float:
    """The scorer's P(success), NaN without a scorer or when scoring fails (a missing feature, as for
    the helper)."""
    if scorer is None:
        return math.nan
    try:
        return float(scorer.score(observation))
    except Exception:  # noqa: BLE001 - a failed score is a missing feature
        return math.nan


def scaled(row: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Features divided by their scales, NaN as 0, as float32 (what the policy network reads)."""
    return np.nan_to_num(np.asarray(row, dtype=np.float64) / scale, nan=0.0, posinf=0.0, neginf=0.0).astype(
        np.float32)
