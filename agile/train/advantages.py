"""Advantage estimators for session-level PPO: ``gae``, ``loop`` and ``grpo``.

- ``gae`` (PPO with a critic): generalized advantage estimation over the action tokens of one
  session, ``delta_t = r_t + gamma * V_{t+1} - V_t``, ``A_t = delta_t + gamma * lam * A_{t+1}``,
  with ``V`` after the last action token equal to 0 (a session is an independent sample that
  ends there). Returns ``(advantages, returns)`` with ``returns = advantages + values``.
- ``loop`` (leave-one-out, no critic, as LOOP): K rollouts of the same task; rollout k's
  advantage is its return minus the mean return of the other K-1 rollouts.
- ``grpo`` (group-normalised): ``(R_k - mean(R)) / (std(R) + eps)`` over the K rollouts of a
  task, with the sample standard deviation (Bessel's correction), as TRL's GRPO trainer.

``loop`` and ``grpo`` give one advantage per rollout; PPO applies it to each of its action tokens.
"""

from __future__ import annotations

import torch

ESTIMATORS = ("gae", "loop", "grpo")


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over one trajectory of T steps (1-D tensors of length T); terminal after the last."""
    if rewards.shape != values.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and values must be 1-D of the same length, got "
                         f"{tuple(rewards.shape)} and {tuple(values.shape)}")
    advantages = torch.zeros_like(rewards)
    running = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    next_value = torch.zeros((), dtype=values.dtype, device=values.device)
    for t in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


def gae_segments(rewards: torch.Tensor, values: torch.Tensor, segment_ids: torch.Tensor,
                 gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over flat tensors holding several trajectories one after another.

    ``segment_ids[i]`` names the trajectory of step i; the steps of a trajectory must be
    contiguous and in time order (the order PPO lays out the action tokens of its sessions).
    """
    advantages = torch.zeros_like(rewards)
    returns = torch.zeros_like(rewards)
    if rewards.numel() == 0:
        return advantages, returns
    change = torch.nonzero(segment_ids[1:] != segment_ids[:-1]).flatten() + 1
    bounds = [0, *change.tolist(), rewards.numel()]
    for start, end in zip(bounds[:-1], bounds[1:]):
        advantages[start:end], returns[start:end] = gae(rewards[start:end], values[start:end],
                                                        gamma, lam)
    return advantages, returns


def _check_groups(returns: torch.Tensor, name: str) -> None:
    if returns.dim() != 2 or returns.shape[1] < 2:
        raise ValueError(f"{name} needs returns shaped [tasks, K] with K >= 2 rollouts per task, "
                         f"got {tuple(returns.shape)}; set rollouts_per_task >= 2.")


def loop(returns: torch.Tensor) -> torch.Tensor:
    """Leave-one-out advantages: ``R_k - mean_{j != k} R_j`` for returns shaped [tasks, K]."""
    _check_groups(returns, "loop")
    k = returns.shape[1]
    others = (returns.sum(dim=1, keepdim=True) - returns) / (k - 1)
    return returns - others


def grpo(returns: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Group-normalised advantages ``(R_k - mean) / (std + eps)`` for returns shaped [tasks, K]."""
    _check_groups(returns, "grpo")
    mean = returns.mean(dim=1, keepdim=True)
    std = returns.std(dim=1, keepdim=True)  # unbiased, as TRL
    return (returns - mean) / (std + eps)


def whiten(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero mean, unit variance (PPO's usual advantage normalisation); a single value gives 0."""
    if x.numel() < 2:
        return x - x.mean() if x.numel() else x
    return (x - x.mean()) / (x.std() + eps)
