"""The online deep-RL baseline: a small torch MLP gate trained by REINFORCE in the environment.

It sees the same features as the features-backend helper (PRM score when a scorer is given,
step, progress, budget left, the observation's numeric features) and learns by playing training
episodes with the real base agent and strong actor. Every intervention it makes while training
is a strong-model / human call, and they are all counted (``OnlineRLReport.calls``): that count
is what the offline helper saves.

Training, top to bottom (``train``):

1. each iteration draws a budget C uniformly from 1..max_budget and plays
   ``episodes_per_iteration`` fresh training episodes (train split, their own seeds) through
   ``agile.rollout.run_episodes`` with the policy as a *sampling* gate;
2. the return of an episode is its success; the advantage is the return minus the mean return
   of the iteration (all its episodes share C, so this baseline is fair);
3. loss = -mean(advantage x sum of log-probabilities of the episode's decisions)
   - entropy_coef x mean entropy; one Adam step per iteration.

At evaluation ``OnlineRLGate`` is greedy: intervene when P(intervene) >= 0.5.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from agile.protocol import STRONG, Observation
from agile.rollout import run_episodes
from helper.budget import BudgetedGate
from helper.features import BASE_FEATURES, SCORE_FEATURE, observation_features


@dataclass
class OnlineRLConfig:
    iterations: int = 60
    """Policy-gradient steps; each plays episodes_per_iteration training episodes."""
    episodes_per_iteration: int = 32
    """Training episodes per step (one budget C for all of them)."""
    max_budget: int = 3
    """Budgets C are drawn uniformly from 1..max_budget."""
    hidden: int = 32
    """Width of the two hidden layers."""
    lr: float = 0.01
    """Adam learning rate."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (keeps exploring early on)."""
    seed: int = 0
    """Seed of the network, the action draws and the training episodes."""
    episode_seed: int = 500
    """Seed of the training episodes (keep it apart from the evaluation seed)."""


class PolicyNet(nn.Module):
    """features -> logit of P(intervene); inputs are scaled by fixed per-feature divisors."""

    def __init__(self, names: list[str], scale: list[float], hidden: int = 32):
        super().__init__()
        self.names = list(names)
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32))
        self.body = nn.Sequential(nn.Linear(len(names), hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                  nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # NaN (a missing score or feature) becomes 0 after scaling: the network learns around it.
        return self.body(torch.nan_to_num(x / self.scale)).squeeze(-1)


class OnlineRLGate(BudgetedGate):
    """Greedy (evaluation) or sampling (training, records what it did) policy gate."""

    name = "online_rl"

    def __init__(self, policy: PolicyNet, budget: int | None = None, scorer=None, sample: bool = False,
                 seed: int = 0):
        super().__init__(budget)
        self.policy = policy
        self.scorer = scorer
        self.sample = sample
        self.generator = torch.Generator().manual_seed(seed)
        self.taken: dict[str, list[tuple[np.ndarray, bool]]] = {}
        self._taken_lock = threading.Lock()

    def features(self, observation: Observation, budget_left: int) -> np.ndarray:
        score = math.nan
        if self.scorer is not None:
            try:
                score = float(self.scorer.score(observation))
            except Exception:  # noqa: BLE001 - a failed score is a missing feature, as for the helper
                score = math.nan
        return observation_features(observation, budget_left, score, self.policy.names)[0]

    def wants(self, observation: Observation, budget_left: int) -> bool:
        x = self.features(observation, budget_left)
        with torch.no_grad():
            p = torch.sigmoid(self.policy(torch.as_tensor(x, dtype=torch.float32)[None]))[0].item()
        if not self.sample:
            return p >= 0.5
        act = bool(torch.rand((), generator=self.generator).item() < p)
        with self._taken_lock:
            self.taken.setdefault(observation.episode_id, []).append((x, act))
        return act


@dataclass
class OnlineRLReport:
    calls: dict[str, int] = field(default_factory=lambda: {"strong": 0, "human": 0})
    """Strong-model and human calls made while training."""
    episodes: int = 0
    """Training episodes played."""
    curve: list[dict] = field(default_factory=list)
    """Per iteration: budget, mean success, mean interventions."""


def feature_names(env, use_score: bool) -> tuple[list[str], list[float]]:
    """The helper's feature names for this environment, and a divisor per feature (inputs ~ [0, 1])."""
    probe = env.episodes(1, seed=0, split="train")[0].observe()
    horizon = float(env.horizon)
    names = [n for n in BASE_FEATURES if use_score or n != SCORE_FEATURE]
    names += [f"f_{key}" for key in sorted(probe.features)]
    divisors = {"step": horizon, "horizon": horizon, "steps_left": horizon, "budget_left": horizon}
    return names, [divisors.get(n, 1.0) for n in names]


def train(env, cfg: OnlineRLConfig, scorer=None) -> tuple[PolicyNet, OnlineRLReport]:
    """Train the policy in ``env`` (an ``helper.environment.Environment``); see the module docstring."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    names, scale = feature_names(env, scorer is not None)
    policy = PolicyNet(names, scale, cfg.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    report = OnlineRLReport()
    for iteration in range(cfg.iterations):
        budget = int(rng.integers(1, cfg.max_budget + 1))
        start = iteration * cfg.episodes_per_iteration
        episodes = env.episodes(cfg.episodes_per_iteration, seed=cfg.episode_seed, start=start, split="train")
        gate = OnlineRLGate(policy, budget, scorer, sample=True, seed=cfg.seed * 100_003 + iteration)
        records = run_episodes(episodes, env.base, env.strong, gate=gate, budget=budget)
        success = np.array([episode.success() for episode in episodes])
        used = [sum(r.intervened for r in ep) for ep in records]
        for ep in records:
            for r in ep:
                if r.intervened:
                    report.calls["strong" if r.actor == STRONG else "human"] += 1
        report.episodes += len(episodes)
        report.curve.append({"iteration": iteration, "budget": budget, "success": float(success.mean()),
                             "interventions": float(np.mean(used))})
        advantage = success - success.mean()
        losses, entropies = [], []
        for episode, adv in zip(episodes, advantage):
            taken = gate.taken.get(episode.episode_id, [])
            if not taken:
                continue
            x = torch.as_tensor(np.stack([t[0] for t in taken]), dtype=torch.float32)
            a = torch.as_tensor([t[1] for t in taken], dtype=torch.float32)
            logits = policy(x)
            log_prob = -nn.functional.binary_cross_entropy_with_logits(logits, a, reduction="sum")
            p = torch.sigmoid(logits)
            entropies.append(-(p * torch.log(p + 1e-8) + (1 - p) * torch.log(1 - p + 1e-8)).mean())
            losses.append(-float(adv) * log_prob)
        if not losses:
            continue
        loss = torch.stack(losses).mean() - cfg.entropy_coef * torch.stack(entropies).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()
    return policy, report
