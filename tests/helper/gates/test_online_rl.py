"""The online deep-RL baseline (stable-baselines3 PPO): it learns a learnable task, counts every
call it makes, and its gate keeps the budget.

The toy task: each episode has HORIZON decisions, one of which (at a position drawn from the
episode's seed) is a "key" decision, visible in the observation's features. The base agent is
right everywhere except at the key decision; the human is always right. A second feature is noise. So with C = 1 the best
policy intervenes exactly at the key (success 1), never-intervene gets (HORIZON - 1) / HORIZON and
first-k gets that plus 1/HORIZON times P(key first).
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from agile.protocol import BASE, HUMAN, Action, Observation, StepResult
from agile.rollout import run_episodes
from helper.gates.online_env import HelpEnv
from helper.gates.online_rl import (
    CURVE_CSV,
    CURVE_PNG,
    OnlineRLConfig,
    OnlineRLGate,
    calls_to_reach,
    curve_frame,
    feature_names,
    save_learning_curve,
    train,
)

HORIZON = 4


class KeyEpisode:
    """See the module docstring. Counts the actions each actor took in it (an independent count)."""

    def __init__(self, seed: int, index: int):
        self.seed, self.episode_id = seed, f"key-{seed}-{index}"
        rng = random.Random(seed * 100_003 + index)
        self.key, self.noise = rng.randrange(HORIZON), [rng.random() for _ in range(HORIZON)]
        self.position, self.rewards, self.actors = 0, [], []

    def observe(self) -> Observation:
        return Observation(self.episode_id, "toy", "key", self.position, f"step {self.position}", HORIZON,
                           {"key": float(self.position == self.key), "noise": self.noise[self.position]})

    def step(self, action: Action) -> StepResult:
        self.rewards.append(float(action.text == "right"))
        self.actors.append(action.actor)
        self.position += 1
        return StepResult(self.rewards[-1], self.done)

    def expert_action(self) -> Action:
        return Action("right", actor=HUMAN)

    @property
    def done(self) -> bool:
        return self.position >= HORIZON

    def success(self) -> float:
        return sum(self.rewards) / HORIZON

    def clone(self):
        raise NotImplementedError


class KeyAgent:
    name = "key-agent"

    def act(self, observations):
        return [Action("wrong" if o.features["key"] else "right", actor=BASE) for o in observations]


class KeyEnvironment:
    """What ``train`` needs of ``helper.data.environment.Environment``; remembers every episode it made."""

    horizon = HORIZON

    def __init__(self):
        self.base, self.strong, self.made = KeyAgent(), None, []

    def episodes(self, n, seed, start=0, split="train"):
        assert split == "train"  # the learner never touches held-out episodes
        episodes = [KeyEpisode(seed, i) for i in range(start, start + n)]
        self.made += episodes
        return episodes


CFG = OnlineRLConfig(budgets=[1, 2], total_timesteps=6_000, n_envs=2, n_steps=128, batch_size=64, eval_every=512,
                     val_episodes=64, patience=1536, seed=0, episode_seed=11, val_seed=22)


def test_ppo_learns_the_key_decision_and_counts_every_call(tmp_path):
    env = KeyEnvironment()
    policy, report = train(env, CFG)
    curve = curve_frame(report)
    at_one = curve[curve["budget"] == 1]
    first, best = at_one["success"].iloc[0], at_one["success"].max()
    # The untrained policy is no better than first-k; the trained one finds the key decision.
    assert first <= (HORIZON - 1) / HORIZON + 1 / HORIZON * 0.5
    assert best == 1.0 and best > first + 0.1
    gate_success = []
    for budget in (1, 2):
        episodes = env.episodes(64, seed=33)
        run_episodes(episodes, env.base, env.strong, gate=OnlineRLGate(policy, budget), budget=budget)
        gate_success.append(np.mean([e.success() for e in episodes]))
    assert gate_success == [1.0, 1.0]

    # Calls: every human action in a training episode is one counted call, and nothing else is.
    training = [e for e in env.made if e.seed == CFG.episode_seed]
    validation = [e for e in env.made if e.seed == CFG.val_seed]
    assert report.calls == {"strong": 0, "human": sum(e.actors.count(HUMAN) for e in training)}
    assert report.validation_calls == {"strong": 0, "human": sum(e.actors.count(HUMAN) for e in validation)}
    assert report.episodes == len(training) and report.calls["human"] > 0
    assert len({e.episode_id for e in training}) == len(training)  # the env copies never share an episode
    assert all(e.actors.count(HUMAN) <= max(CFG.budgets) for e in training)
    assert report.timesteps >= 6_000 or report.stopped.startswith("flattened")
    assert curve["calls"].is_monotonic_increasing and curve["calls"].iloc[-1] <= report.calls["human"]

    csv, png = save_learning_curve(report, tmp_path, helper_success={1: 1.0, 2: 1.0})
    assert csv == tmp_path / CURVE_CSV and png == tmp_path / CURVE_PNG and png.stat().st_size > 5_000
    reached = calls_to_reach(report, {1: 1.0, 2: 2.0})
    assert reached[1] == int(at_one.loc[at_one["success"] >= 1.0, "calls"].min()) and reached[2] is None


def test_env_reward_sums_to_success_and_spends_at_most_the_budget():
    env = KeyEnvironment()
    names, scale = feature_names(env, use_score=False)
    genv = HelpEnv(env, names, scale, budgets=[1, 2, 3], episode_seed=5)
    for episode in range(20):
        obs, info = genv.reset(seed=episode if episode == 0 else None)
        assert obs.shape == (len(names),) and obs[names.index("budget_left")] == info["budget"] / HORIZON
        total, done, decisions = 0.0, False, 0
        while not done:
            obs, reward, done, _, info = genv.step(1)  # always asks: only the budget stops it
            total, decisions = total + reward, decisions + 1
        played = env.made[-1]
        assert played.actors.count(HUMAN) == info["budget"] == decisions  # after the budget, no decisions
        assert abs(total - played.success()) < 1e-12 and info["success"] == played.success()
    assert genv.calls["human"] == sum(e.actors.count(HUMAN) for e in env.made)


@pytest.mark.parametrize("top", [1, 2, 3, 5])
def test_budgets_one_to_m_draw_what_the_former_one_to_max_budget_drew(top):
    """Budgets 1..M are drawn from the list with one generator call: the same C, episode after episode,
    as the former integers(1, M + 1), so a run with the default budgets trains on the same ones."""
    from gymnasium.utils.seeding import np_random

    env = KeyEnvironment()
    names, scale = feature_names(env, use_score=False)
    genv = HelpEnv(env, names, scale, budgets=list(range(1, top + 1)), episode_seed=5)
    drawn = [genv.reset(seed=11 if k == 0 else None)[1]["budget"] for k in range(60)]
    former, _ = np_random(11)
    assert drawn == [int(former.integers(1, top + 1)) for _ in range(60)]


def test_gate_never_exceeds_its_budget():
    env = KeyEnvironment()
    policy, _ = train(env, OnlineRLConfig(budgets=[1], total_timesteps=1, n_envs=1, n_steps=8, eval_every=1,
                                          val_episodes=2))
    with torch.no_grad():  # make the greedy policy want to intervene everywhere
        policy.model.policy.action_net.bias[:] = torch.tensor([-50.0, 50.0])
    assert policy.intervene(np.zeros((3, len(policy.names)))).all()
    for budget in range(HORIZON + 1):
        episodes = env.episodes(8, seed=44)
        # The loop would allow every decision; the gate's own budget must stop it.
        run_episodes(episodes, env.base, env.strong, gate=OnlineRLGate(policy, budget), budget=HORIZON)
        assert [e.actors.count(HUMAN) for e in episodes] == [budget] * 8


def test_batched_vec_env_plays_exactly_as_one_env_at_a_time():
    from stable_baselines3.common.vec_env import DummyVecEnv

    from helper.gates.online_env import HelpVecEnv

    class CountingAgent(KeyAgent):
        def act(self, observations):
            self.batches.append(len(observations))
            return super().act(observations)

    runs = []
    for vec_class in (DummyVecEnv, HelpVecEnv):
        env = KeyEnvironment()
        env.base = CountingAgent()
        env.base.batches = []
        names, scale = feature_names(env, use_score=False)
        copies = [HelpEnv(env, names, scale, [1, 2, 3], 9, rank=r, stride=3) for r in range(3)]
        vec = vec_class([lambda g=g: g for g in copies])
        vec.seed(5)
        trace = [vec.reset().tolist()]
        rng = np.random.default_rng(0)
        for _ in range(40):
            obs, rewards, dones, infos = vec.step(rng.integers(0, 2, size=3))
            final = [None if "terminal_observation" not in i else i["terminal_observation"].tolist() for i in infos]
            trace += [obs.tolist(), rewards.tolist(), dones.tolist(), final]
        runs.append((trace, env.base.batches, [e.actors for e in env.made]))
    (one, one_batches, one_actors), (many, many_batches, many_actors) = runs
    assert one_actors == many_actors and one == many and any(True in step for step in one[3::4])
    assert max(one_batches) == 1 and max(many_batches) == 3  # the batched env asks the agent for all copies at once


class ProposalScorer:
    """Reads only the proposal: 0 where the base agent proposes a wrong answer, 1 elsewhere."""

    decide_after = "proposal"

    def __init__(self):
        self.calls = []

    def score(self, observation, proposal=None):
        if proposal is None:
            raise ValueError("this scorer reads the proposal")
        self.calls.append((observation.episode_id, observation.step, proposal.text))
        return 0.0 if proposal.text == "wrong" else 1.0


class HiddenKeyEpisode(KeyEpisode):
    """The key decision is in no numeric feature (the policy's input), only in the state text the
    base agent reads: the learner can find it only through the base agent's proposal."""

    def observe(self) -> Observation:
        text = f"step {self.position}" + (" (the hard one)" if self.position == self.key else "")
        return Observation(self.episode_id, "toy", "key", self.position, text, HORIZON,
                           {"noise": self.noise[self.position]})

    def clone(self):
        return copy.deepcopy(self)


class HiddenKeyAgent(KeyAgent):
    def __init__(self):
        self.asked = 0

    def act(self, observations):
        self.asked += len(observations)
        return [Action("wrong" if "hard" in o.state_text else "right", actor=BASE) for o in observations]


class HiddenKeyEnvironment(KeyEnvironment):
    def __init__(self):
        super().__init__()
        self.base = HiddenKeyAgent()

    def episodes(self, n, seed, start=0, split="train"):
        assert split == "train"
        episodes = [HiddenKeyEpisode(seed, i) for i in range(start, start + n)]
        self.made += episodes
        return episodes


def test_proposal_mode_env_scores_the_proposal_and_replays_it_when_kept():
    env = HiddenKeyEnvironment()
    scorer = ProposalScorer()
    names, scale = feature_names(env, use_score=True)
    genv = HelpEnv(env, names, scale, budgets=[1, 2], episode_seed=3, scorer=scorer, decide_after="proposal")
    rng = np.random.default_rng(1)
    for _ in range(30):
        obs, info = genv.reset(seed=0)
        episode, done = env.made[-1], False
        while not done:
            # The score is the proposal's: 0 exactly at the key decision.
            assert obs[names.index("prm_score")] == (0.0 if episode.position == episode.key else 1.0)
            action = int(rng.integers(0, 2))
            played = len(episode.actors)
            obs, _, done, _, info = genv.step(action)
            # Kept: the real episode played the base agent's answer; intervened: the human's.
            assert episode.actors[played] == (HUMAN if action else BASE)
        assert episode.actors.count(HUMAN) <= info["budget"]
    # The base agent is asked exactly once per decision: a kept proposal is replayed, never asked
    # again (where no budget is left it acts directly).
    assert env.base.asked == sum(len(e.actors) for e in env.made) == 30 * HORIZON
    assert genv.calls["human"] == sum(e.actors.count(HUMAN) for e in env.made) > 0


def test_ppo_in_proposal_mode_finds_the_mistake_only_the_proposal_shows():
    cfg = OnlineRLConfig(budgets=[1], total_timesteps=6_000, n_envs=2, n_steps=128, batch_size=64, eval_every=512,
                         val_episodes=64, patience=1536, seed=0, episode_seed=11, val_seed=22)
    results = {}
    for mode, scorer in (("state", None), ("proposal", ProposalScorer())):
        env = HiddenKeyEnvironment()
        policy, _ = train(env, cfg, scorer)
        assert policy.decide_after == mode
        episodes = env.episodes(64, seed=33)
        run_episodes(episodes, env.base, env.strong, gate=OnlineRLGate(policy, 1, scorer), budget=1)
        results[mode] = float(np.mean([e.success() for e in episodes]))
    # Reading the proposal's score, the learner intervenes at the key: every episode fully right.
    assert results["proposal"] == 1.0
    # On the state's features the key is invisible: at best first-k's luck, below 1.
    assert results["state"] < 1.0 - 0.5 / HORIZON


def test_a_pool_of_training_episodes_is_replayed_in_turn_and_still_learns():
    env = KeyEnvironment()
    names, scale = feature_names(env, use_score=False)
    copies = [HelpEnv(env, names, scale, [1, 2], 9, rank=r, stride=2, pool=3) for r in range(2)]
    for _ in range(3):
        for genv in copies:
            genv.reset(seed=0)
    replayed = [e.episode_id for e in env.made if e.seed == 9]
    assert replayed == [f"key-9-{i}" for i in (0, 1, 2, 0, 1, 2)]  # indices wrap at 3
    with pytest.raises(ValueError, match="pool=0"):
        HelpEnv(env, names, scale, [1, 2], 9, pool=0)
    with pytest.raises(ValueError, match="train_episodes"):
        train(env, OnlineRLConfig(train_episodes=0))
    # Eight training episodes, replayed, are enough to learn the key decision of unseen validation ones.
    env = KeyEnvironment()
    _, report = train(env, OnlineRLConfig(**{**vars(CFG), "train_episodes": 8}))
    played = {e.episode_id for e in env.made if e.seed == CFG.episode_seed}
    assert len(played) == 8
    assert calls_to_reach(report, {1: 1.0})[1] is not None
