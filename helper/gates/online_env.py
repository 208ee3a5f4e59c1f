"""The helpgate episode loop as a ``gymnasium`` environment, for the online deep-RL baseline.

    genv = HelpEnv(env, names, scale, budgets=[1, 2, 3], episode_seed=500)   # env: helper.data.environment.Environment
    obs, _ = genv.reset(seed=0)
    obs, reward, terminated, truncated, info = genv.step(1)              # 1: intervene, 0: let the agent act

One gymnasium episode is one helpgate episode of the training split (a fresh one at every reset,
indices ``rank, rank + stride, ...`` of seed ``episode_seed``, so parallel copies never share one;
with ``pool=N`` those indices wrap at N: the learner replays a fixed set of N training episodes, as
the offline helper learns from a fixed collection).

- **Budget.** At reset a budget C is drawn uniformly from ``budgets``; ``budget_left`` is in the
  observation, so one policy serves every C (as the helper does). The episode's interventions are
  counted by ``agile.budget.EpisodeBudget``, the episode loop's count.
- **Observation.** The helper's feature row (``helper.gates.features.observation_features``: the PRM
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
  answered).
- **Deciding after the proposal** (``decide_after="proposal"``, what ``train`` picks for a PRM that
  reads proposals): as ``run_episodes`` does it, at a decision point with budget left the base agent
  first plays the decision on a clone of the episode; the observation's score is the scorer's score
  of that proposal; keeping it (action 0) replays the proposal on the real episode, so the base
  agent is asked once per decision; intervening (action 1) lets the strong actor play instead.
  Where no budget is left the base agent acts directly. The policy thus sees exactly what the
  helper and ``prm_threshold`` see in that mode.

Each decision goes through ``agile.rollout.decide``, the loop's own per-step function (tool rounds
included). ``HelpVecEnv`` steps PPO's copies of the env together (``step_many``): one ``decide``
call per round for all of them, so an LLM base agent answers n_envs episodes in one batch, as in
``run_episodes`` (a plain ``HelpEnv.step`` is a batch of one).
"""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

from agile.budget import EpisodeBudget
from agile.protocol import DECIDE_AFTER, STRONG
from agile.rollout import decide, proposal_action, replay_checked
from helper.gates.features import observation_features


class HelpEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, env, names: list[str], scale: list[float], budgets: list[int], episode_seed: int,
                 scorer=None, split: str = "train", rank: int = 0, stride: int = 1, decide_after: str = "state",
                 pool: int | None = None):
        if pool is not None and pool < 1:
            raise ValueError(f"pool={pool}: the number of training episodes replayed must be >= 1 (None: fresh ones).")
        if decide_after not in DECIDE_AFTER:
            raise ValueError(f"decide_after={decide_after!r}: use one of {DECIDE_AFTER}.")
        if not budgets or min(budgets) < 1:
            raise ValueError(f"budgets={list(budgets)}: online RL draws each training episode's budget from them; "
                             "give one or more budgets >= 1.")
        self.env = env
        self.names = list(names)
        self.scale = np.asarray(scale, dtype=np.float64)
        self.budgets = [int(c) for c in budgets]
        self.episode_seed = int(episode_seed)
        self.scorer = scorer
        self.split = split
        self.next_index = int(rank)
        self.stride = int(stride)
        self.pool = pool
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(len(self.names),), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.calls = {"strong": 0, "human": 0}
        self.episodes_played = 0
        self.episode = None
        self.episode_budget = EpisodeBudget(0)
        self.decide_after = decide_after
        self.proposal = None
        """The base agent's proposal at the current decision point (proposal mode), played on a clone."""

    # -- gymnasium API ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # One draw whatever the list; for budgets 1..C the same draw as the former integers(1, C + 1).
        self.budget = self.budgets[int(self.np_random.integers(0, len(self.budgets)))]
        self.episode_budget = EpisodeBudget(self.budget)
        index = self.next_index if self.pool is None else self.next_index % self.pool
        self.episode = self.env.episodes(1, seed=self.episode_seed, start=index, split=self.split)[0]
        self.next_index += self.stride
        self.episodes_played += 1
        self.proposal = None
        # A fresh episode has at least one decision and budget >= 1: the first one is ours to make.
        _propose([self])
        return self._observe(), {"budget": self.budget}

    def step(self, action):
        return step_many([self], [action])[0]

    @property
    def budget_left(self) -> int:
        """Interventions left in the current episode."""
        return self.episode_budget.left(self.episode.episode_id) if self.episode is not None else 0

    # -- internals --------------------------------------------------------------------------------
    def _finish(self, before: float):
        """The step's (obs, reward, terminated, truncated, info) once its decisions are played."""
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

    def _played(self, observation, decision, intervened: bool) -> None:
        self.proposal = None
        if intervened:
            self.calls["strong" if decision.actor == STRONG else "human"] += 1
            self.episode_budget.spend(self.episode.episode_id)
        if self.scorer is not None and hasattr(self.scorer, "record_action"):
            self.scorer.record_action(observation, decision.action_text)

    def _observe(self) -> np.ndarray:
        observation = self.episode.observe()
        proposal = None if self.proposal is None else proposal_action(self.proposal)
        score = score_or_nan(self.scorer, observation, proposal)
        row = observation_features(observation, self.budget_left, score, self.names)[0]
        return scaled(row, self.scale)


def step_many(genvs: list[HelpEnv], actions) -> list[tuple]:
    """``HelpEnv.step`` for several envs at once: every round of decisions is one ``decide`` call,
    so the base agent (and the strong actor) act for all of them in one batch, as in ``run_episodes``."""
    for genv in genvs:
        if genv.episode is None or genv.episode.done:
            raise RuntimeError("HelpEnv.step called on a finished episode: call reset() first.")
    before = [float(genv.episode.success()) for genv in genvs]
    _play(genvs, [bool(int(a)) and genv.budget_left > 0 for genv, a in zip(genvs, actions)])
    while auto := [genv for genv in genvs if not genv.episode.done and genv.budget_left == 0]:
        _play(auto, [False] * len(auto))
    _propose(genvs)
    return [genv._finish(b) for genv, b in zip(genvs, before)]


def _play(genvs: list[HelpEnv], intervene: list[bool]) -> None:
    """One decision point in each env's episode, by the strong actor (``None``: the human) or the base
    agent; a kept proposal is replayed rather than asked for again."""
    observations = [genv.episode.observe() for genv in genvs]
    kept = [genv.proposal is not None and not i for genv, i in zip(genvs, intervene)]
    asked = [k for k in range(len(genvs)) if not kept[k]]
    actors = [genvs[k].env.strong if intervene[k] else genvs[k].env.base for k in asked]
    decisions = dict(zip(asked, decide([genvs[k].episode for k in asked], actors)))
    for k in range(len(genvs)):
        if kept[k]:
            decisions[k] = replay_checked(genvs[k].episode, genvs[k].proposal)
    for k, (genv, observation, i) in enumerate(zip(genvs, observations, intervene)):
        genv._played(observation, decisions[k], i)


def _propose(genvs: list[HelpEnv]) -> None:
    """Proposal mode: the base agent's proposal at each env's next decision point with budget left,
    played on clones in one batched ``decide``."""
    due = [genv for genv in genvs
           if genv.decide_after == "proposal" and not genv.episode.done and genv.budget_left > 0]
    if due:
        for genv, decision in zip(due, decide([g.episode.clone() for g in due], [g.env.base for g in due])):
            genv.proposal = decision


class HelpVecEnv(DummyVecEnv):
    """``DummyVecEnv`` of ``HelpEnv`` copies whose step is one batched ``step_many``."""

    def step_wait(self):
        for i, (obs, reward, terminated, truncated, info) in enumerate(step_many(self.envs, self.actions)):
            self.buf_rews[i], self.buf_dones[i], self.buf_infos[i] = reward, terminated or truncated, info
            info["TimeLimit.truncated"] = truncated and not terminated
            if self.buf_dones[i]:  # as DummyVecEnv: keep the final observation, start the next episode
                info["terminal_observation"] = obs
                obs, self.reset_infos[i] = self.envs[i].reset()
            self._save_obs(i, obs)
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), copy.deepcopy(self.buf_infos)


def score_or_nan(scorer, observation, proposal=None) -> float:
    """The scorer's P(success) (of ``proposal`` when one is given), NaN without a scorer or when
    scoring fails (a missing feature, as for the helper)."""
    if scorer is None:
        return math.nan
    try:
        if proposal is not None:
            return float(scorer.score(observation, proposal))
        return float(scorer.score(observation))
    except Exception:  # noqa: BLE001 - a failed score is a missing feature
        return math.nan


def scaled(row: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Features divided by their scales, NaN as 0, as float32 (what the policy network reads)."""
    return np.nan_to_num(np.asarray(row, dtype=np.float64) / scale, nan=0.0, posinf=0.0, neginf=0.0).astype(
        np.float32)
