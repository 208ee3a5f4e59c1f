"""The online deep-RL baseline: stable-baselines3 PPO trained in the environment itself.

    policy, report = train(env, OnlineRLConfig(budgets=[1, 2, 3]), scorer=None)   # env: helper.data.environment.Environment
    gate = OnlineRLGate(policy, budget=2, scorer=None)                        # greedy policy, as evaluated
    helper_success, _ = validation_success(env, cfg, helper.with_budget)   # the same validation episodes
    save_learning_curve(report, "runs/demo/sweep", helper_success)

It sees the same features as the features-backend helper (``helper.gates.online_env.HelpEnv``: PRM score
when a scorer is given, of the base agent's proposal when that PRM reads proposals, as the helper's
is; step, progress, budget left, the observation's numeric features) and learns
by playing fresh training-split episodes with the real base agent and strong actor. Every
intervention it makes while learning is a strong-model / human call, all counted
(``OnlineRLReport.calls``): that count is what the offline helper saves.

Training, top to bottom (``train``):

1. PPO (``MlpPolicy``, undiscounted returns; reward = the episode's success, spread over the steps
   that earned it) collects ``n_steps`` decisions per copy of the env, then updates;
2. every ``eval_every`` timesteps (and before the first update) the greedy policy plays a fixed set
   of ``val_episodes`` training-split validation episodes (their own seed; never the held-out test
   episodes) at every C of ``budgets``: one point of the learning curve, with the cumulative
   training calls so far;
3. it stops when the mean validation success over C has not improved by more than ``min_delta``
   for ``patience`` timesteps (the curve has flattened), or at ``total_timesteps``; the policy
   returned is the one with the best mean validation success.

The validation games call the strong actor / human too; they are counted apart
(``OnlineRLReport.validation_calls``), since a deployment could stop on a fixed budget instead.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from agile.budget import ScoredGate
from agile.protocol import STRONG, Observation
from agile.rollout import run_episodes
from helper.gates.online_env import HelpEnv, HelpVecEnv, scaled, score_or_nan
from helper.gates.features import BASE_FEATURES, SCORE_FEATURE, observation_features

CURVE_CSV, CURVE_PNG = "online_rl_curve.csv", "online_rl_curve.png"


@dataclass
class OnlineRLConfig:
    budgets: list[int] = field(default_factory=lambda: [1, 2, 3])
    """Training budgets C: one is drawn uniformly from them at each training episode's start, and the
    learning curve's validation plays each."""
    total_timesteps: int = 60_000
    """Most decisions (PPO timesteps) to train for, if the learning curve has not flattened before."""
    n_envs: int = 4
    """Copies of the environment PPO collects from (each plays its own training episodes)."""
    n_steps: int = 256
    """Decisions collected per copy between two PPO updates."""
    batch_size: int = 256
    """PPO minibatch size (at most one rollout, n_steps x n_envs)."""
    n_epochs: int = 10
    """PPO passes over each rollout."""
    lr: float = 1e-3
    """Adam learning rate (on the ProductQA simulator 1e-3 reaches the plateau in about half the calls of 3e-4)."""
    gae_lambda: float = 0.95
    """GAE lambda (returns are undiscounted: gamma is 1, episodes are short)."""
    ent_coef: float = 0.01
    """Entropy bonus (keeps exploring early on)."""
    hidden: int = 64
    """Width of the two hidden layers of the policy and value networks."""
    eval_every: int = 4096
    """Timesteps between two points of the learning curve."""
    val_episodes: int = 128
    """Validation episodes (training split, seed val_seed) played greedily at each C per curve point."""
    patience: int = 16_384
    """Stop once this many training timesteps have passed without a gain of more than min_delta (long
    enough to sit out the early phase where the greedy policy intervenes at every decision, ~6k
    timesteps on the ProductQA simulator)."""
    min_delta: float = 0.005
    """Smallest gain of the mean validation success over C that counts as an improvement."""
    seed: int = 0
    """Seed of the networks, PPO's action draws and the budget draws."""
    episode_seed: int = 500
    """Seed of the training episodes (keep it apart from the evaluation seed)."""
    train_episodes: int | None = None
    """Replay this many training episodes in turn instead of a fresh one at every reset (None). With an
    LLM base agent a replayed episode's proposals come from its answer cache, so interaction costs
    LLM calls only for histories not met before: what makes a flattened curve affordable on a CPU."""
    val_seed: int = 700
    """Seed of the validation episodes (training split; apart from episode_seed and the evaluation seed)."""

    def check(self) -> None:
        """Refuse values that cannot work, naming the field."""
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"OnlineRLConfig.budgets={self.budgets}: give one or more budgets >= 1 (a budget of 0 "
                             "leaves nothing to learn).")
        for name in ("total_timesteps", "n_envs", "n_steps", "batch_size", "n_epochs", "eval_every",
                     "val_episodes", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"OnlineRLConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.train_episodes is not None and self.train_episodes < 1:
            raise ValueError(f"OnlineRLConfig.train_episodes must be >= 1 or None (fresh episodes), "
                             f"got {self.train_episodes}.")


@dataclass
class RLPolicy:
    """A trained PPO model and the features it reads (names, and the scale each is divided by)."""

    model: PPO
    names: list[str]
    scale: list[float]
    decide_after: str = "state"
    """``"proposal"``: the score feature is the PRM's score of the base agent's proposal."""

    def intervene(self, rows: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Whether to intervene, one bool per (unscaled) feature row."""
        x = np.stack([scaled(row, np.asarray(self.scale)) for row in np.atleast_2d(rows)])
        actions, _ = self.model.predict(x, deterministic=deterministic)
        return np.asarray(actions).astype(bool)


class OnlineRLGate(ScoredGate):
    """The greedy policy as a gate (``deterministic=True``); the scorer supplies the PRM feature."""

    name = "online_rl"

    def __init__(self, policy: RLPolicy, budget: int | None = None, scorer=None):
        super().__init__(budget)
        self.policy = policy
        self.scorer = scorer
        self.decide_after = policy.decide_after

    def wants(self, observation: Observation, budget_left: int, proposal=None) -> bool:
        score = score_or_nan(self.scorer, observation, proposal)
        row = observation_features(observation, budget_left, score, self.policy.names)
        return bool(self.policy.intervene(row)[0])


@dataclass
class OnlineRLReport:
    calls: dict[str, int] = field(default_factory=lambda: {"strong": 0, "human": 0})
    """Strong-model and human calls made by the learner while training."""
    episodes: int = 0
    """Training episodes started (the last one of each env copy may be unfinished when training stops)."""
    timesteps: int = 0
    """Training decisions (PPO timesteps) played."""
    validation_calls: dict[str, int] = field(default_factory=lambda: {"strong": 0, "human": 0})
    """Strong-model and human calls of the learning curve's validation games (not in ``calls``)."""
    curve: list[dict] = field(default_factory=list)
    """Per curve point and budget: timesteps, episodes, cumulative training calls, validation success."""
    stopped: str = ""
    """Why training stopped: the curve flattened, or total_timesteps was reached."""
    best_timesteps: int = 0
    """Timesteps of the returned (best validation) policy."""


def feature_names(env, use_score: bool) -> tuple[list[str], list[float]]:
    """The helper's feature names for this environment, and a divisor per feature (inputs ~ [0, 1])."""
    probe = env.episodes(1, seed=0, split="train")[0].observe()
    horizon = float(env.horizon)
    names = [n for n in BASE_FEATURES if use_score or n != SCORE_FEATURE]
    names += [f"f_{key}" for key in sorted(probe.features)]
    divisors = {"step": horizon, "horizon": horizon, "steps_left": horizon, "budget_left": horizon}
    return names, [divisors.get(n, 1.0) for n in names]


def validation_success(env, cfg: OnlineRLConfig, gate_for_budget) -> tuple[dict[int, float], dict[str, int]]:
    """Success of ``gate_for_budget(C)`` at each C of ``cfg.budgets`` on the learning curve's validation
    episodes, and the strong / human calls spent. A reference drawn on the curve (the helper's success)
    must be measured here, on the same episodes: held-out groups have another success level."""
    success, calls = {}, {"strong": 0, "human": 0}
    for budget in cfg.budgets:
        episodes = env.episodes(cfg.val_episodes, seed=cfg.val_seed, split="train")
        records = run_episodes(episodes, env.base, env.strong, gate=gate_for_budget(budget), budget=budget)
        success[budget] = float(np.mean([episode.success() for episode in episodes]))
        for record in (r for rows in records for r in rows if r.intervened):
            calls["strong" if record.actor == STRONG else "human"] += 1
    return success, calls


class _Curve(BaseCallback):
    """Learning-curve points and the stopping rule (see the module docstring)."""

    def __init__(self, env, policy: RLPolicy, cfg: OnlineRLConfig, scorer, genvs: list[HelpEnv],
                 report: OnlineRLReport):
        super().__init__()
        self.env, self.rl_policy, self.cfg, self.scorer, self.genvs, self.report = env, policy, cfg, scorer, genvs, report
        self.best, self.best_state, self.last_eval, self.stop = -np.inf, None, -np.inf, False
        self.reference, self.reference_timesteps = -np.inf, 0  # the last value that counted as a gain

    def evaluate(self) -> None:
        self.last_eval = self.num_timesteps
        self.report.calls = {k: sum(g.calls[k] for g in self.genvs) for k in ("strong", "human")}
        self.report.episodes = sum(g.episodes_played for g in self.genvs)
        self.report.timesteps = int(self.num_timesteps)
        success, calls = validation_success(self.env, self.cfg, lambda c: OnlineRLGate(self.rl_policy, c, self.scorer))
        for k in calls:
            self.report.validation_calls[k] += calls[k]
        for budget, value in success.items():
            self.report.curve.append({
                "timesteps": self.report.timesteps, "episodes": self.report.episodes,
                "calls": sum(self.report.calls.values()), **self.report.calls, "budget": budget, "success": value,
            })
        mean = float(np.mean(list(success.values())))
        # One line per curve point: a run that trains until its curve flattens can take an hour.
        print(f"online_rl: {self.report.timesteps:,} timesteps, {sum(self.report.calls.values()):,} training calls, "
              "validation success " + " ".join(f"C={c}:{v:.3f}" for c, v in sorted(success.items())), flush=True)
        if mean > self.best:
            self.best, self.best_state = mean, copy.deepcopy(self.model.policy.state_dict())
            self.report.best_timesteps = self.report.timesteps
        if mean > self.reference + self.cfg.min_delta:
            self.reference, self.reference_timesteps = mean, self.report.timesteps
        self.stop = self.report.timesteps - self.reference_timesteps >= self.cfg.patience

    def _on_rollout_start(self) -> None:
        # Called after each update (and before the first): the policy is fixed while it is evaluated.
        if self.num_timesteps - self.last_eval >= self.cfg.eval_every or self.num_timesteps == 0:
            self.evaluate()

    def _on_step(self) -> bool:
        return not self.stop


def train(env, cfg: OnlineRLConfig, scorer=None) -> tuple[RLPolicy, OnlineRLReport]:
    """Train PPO in ``env`` (an ``helper.data.environment.Environment``); see the module docstring."""
    cfg.check()
    names, scale = feature_names(env, scorer is not None)
    # A PRM that reads proposals is read after the base agent proposes, as the helper reads it.
    mode = getattr(scorer, "decide_after", "state") if scorer is not None else "state"
    genvs = [HelpEnv(env, names, scale, cfg.budgets, cfg.episode_seed, scorer, rank=i, stride=cfg.n_envs,
                     decide_after=mode, pool=cfg.train_episodes) for i in range(cfg.n_envs)]
    vec = HelpVecEnv([lambda g=g: g for g in genvs])
    batch_size = min(cfg.batch_size, cfg.n_steps * cfg.n_envs)  # a short run has short rollouts
    model = PPO("MlpPolicy", vec, learning_rate=cfg.lr, n_steps=cfg.n_steps, batch_size=batch_size,
                n_epochs=cfg.n_epochs, gamma=1.0, gae_lambda=cfg.gae_lambda, ent_coef=cfg.ent_coef,
                policy_kwargs={"net_arch": [cfg.hidden, cfg.hidden]}, seed=cfg.seed, device="cpu", verbose=0)
    policy = RLPolicy(model, names, scale, mode)
    report = OnlineRLReport()
    curve = _Curve(env, policy, cfg, scorer, genvs, report)
    model.learn(total_timesteps=cfg.total_timesteps, callback=curve)
    report.calls = {k: sum(g.calls[k] for g in genvs) for k in ("strong", "human")}
    report.episodes = sum(g.episodes_played for g in genvs)
    report.timesteps = int(model.num_timesteps)
    if curve.stop:
        report.stopped = f"flattened: no gain above {cfg.min_delta} in {cfg.patience} timesteps"
    else:
        report.stopped = f"reached total_timesteps={cfg.total_timesteps}"
        if model.num_timesteps > curve.last_eval:
            curve.evaluate()  # the last update's point
    model.policy.load_state_dict(curve.best_state)
    model.policy.set_training_mode(False)
    return policy, report


def curve_frame(report: OnlineRLReport) -> pd.DataFrame:
    """The learning curve, one row per (curve point, budget)."""
    columns = ["timesteps", "episodes", "calls", "strong", "human", "budget", "success"]
    return pd.DataFrame(report.curve, columns=columns)


def calls_to_reach(report: OnlineRLReport, target: dict[int, float]) -> dict[int, int | None]:
    """Per budget C: the cumulative training calls at the first curve point whose validation
    success reaches ``target[C]`` (e.g. the helper's success), ``None`` when never reached."""
    frame = curve_frame(report)
    reached = {}
    for budget, value in target.items():
        rows = frame[(frame["budget"] == int(budget)) & (frame["success"] >= float(value))]
        reached[int(budget)] = None if rows.empty else int(rows["calls"].min())
    return reached


def save_learning_curve(report: OnlineRLReport, path: str | Path, helper_success: dict[int, float] | None = None,
                        label: str = "helper") -> tuple[Path, Path]:
    """Write ``online_rl_curve.csv`` and ``online_rl_curve.png`` into the folder ``path``: success at
    each C against cumulative training calls, the helper's success at each C as a dashed line (measure
    it on the same validation episodes: ``validation_success``; ``label`` names that reference)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    frame = curve_frame(report)
    frame.to_csv(folder / CURVE_CSV, index=False)
    reached = calls_to_reach(report, helper_success) if helper_success else None
    save_learning_curve_plot(frame, folder / CURVE_PNG, helper_success, reached, label)
    return folder / CURVE_CSV, folder / CURVE_PNG


def save_learning_curve_plot(frame: pd.DataFrame, path: str | Path, helper_success: dict | None = None,
                             reached: dict | None = None, label: str = "helper") -> Path:
    """The online learner's curve (``helper.gates.online_rl.curve_frame``): validation success at each
    budget C against cumulative training calls; the helper's success at C as a dashed line, and in
    the legend the calls at which the curve first reaches it (or "not reached")."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 5.0), dpi=110)
    axes = figure.add_subplot()
    for k, (budget, rows) in enumerate(frame.groupby("budget", sort=True)):
        color = f"C{k}"
        rows = rows.sort_values("calls")
        axes.plot(rows["calls"], rows["success"], marker="o", markersize=3, color=color, label=f"online_rl C={budget}")
        if helper_success and budget in helper_success:
            note = ""
            if reached is not None:
                hit = reached.get(int(budget))
                note = f" (reached at {hit} calls)" if hit is not None else " (not reached)"
            axes.axhline(helper_success[budget], color=color, linestyle="--", linewidth=1,
                         label=f"{label} C={budget}{note}")
    axes.set_xlabel("cumulative training calls (strong / human)")
    axes.set_ylabel("validation success (greedy policy)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
