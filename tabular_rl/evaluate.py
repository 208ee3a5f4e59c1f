"""Exact evaluation of a policy in a ``TabularModel``: values backward, occupancy forward.

A policy is a (T, S, B) array of intervention probabilities.

* ``hard_budget=True``: the last axis is the budget left ``b = 0 .. C``; intervening moves to
  ``b - 1`` and is impossible at ``b = 0`` (``policy[..., 0]`` must be 0).
* ``hard_budget=False``: B = 1 and interventions are not tracked (budget in expectation).

Both passes are matrix products per step; nothing loops over states or budget levels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .estimate import TabularModel


@dataclass
class Evaluation:
    expected_return: float
    expected_interventions: float
    expected_success: float
    """NaN when the model carries no success table."""
    occupancy: np.ndarray
    """(T, S, B, 2) probability of reaching (step, state, budget left) and taking each action."""


def q_values(model: TabularModel, t: int, v_next: np.ndarray, hard_budget: bool) -> tuple[np.ndarray, np.ndarray]:
    """(Q_base, Q_intervene), each (S, B), given next-step values ``v_next`` (S, B).

    With a hard budget Q_intervene at b = 0 is -inf (the action is not available).
    """
    S = model.n_states
    # (S, 2, S) @ (S, B) -> (S, 2, B); the terminal column contributes value 0.
    cont = model.transitions[t, :, :, :S] @ v_next
    q0 = model.rewards[t, :, 0, None] + cont[:, 0]
    if not hard_budget:
        return q0, model.rewards[t, :, 1, None] + cont[:, 1]
    q1 = np.full_like(q0, -np.inf)
    q1[:, 1:] = model.rewards[t, :, 1, None] + cont[:, 1, :-1]
    return q0, q1


def policy_values(model: TabularModel, policy: np.ndarray, hard_budget: bool) -> np.ndarray:
    """V[t, s, b]: expected return-to-go of ``policy`` (backward induction)."""
    T, S, B = policy.shape
    values = np.zeros((T, S, B))
    v_next = np.zeros((S, B))
    for t in range(T - 1, -1, -1):
        q0, q1 = q_values(model, t, v_next, hard_budget)
        p = policy[t]
        v_next = values[t] = (1 - p) * q0 + p * np.where(p > 0, q1, 0.0)
    return values


def evaluate(model: TabularModel, policy: np.ndarray, budget: int, hard_budget: bool) -> Evaluation:
    """Occupancy of ``policy`` from the start distribution (with ``budget`` left when hard)."""
    T, S, B = policy.shape
    if hard_budget and B != budget + 1:
        raise ValueError(f"policy has {B} budget levels; a hard budget of {budget} needs {budget + 1}")
    if hard_budget and np.any(policy[:, :, 0] > 0):
        raise ValueError("policy intervenes with no budget left (policy[:, :, 0] must be 0)")
    occ = np.zeros((T, S, B, 2))
    d = np.zeros((S, B))
    d[:, -1] = model.start
    for t in range(T):
        if model.entries is not None and t:  # episodes aligned at their ends enter later (tabular_rl.aligned)
            d[:, -1] += model.entries[t]
        x1 = d * policy[t]
        occ[t, :, :, 0], occ[t, :, :, 1] = d - x1, x1
        p = model.transitions[t, :, :, :S]
        d = p[:, 0].T @ (d - x1)
        go = p[:, 1].T @ x1
        if hard_budget:
            d[:, :-1] += go[:, 1:]
        else:
            d += go
    success = np.nan if model.success is None else float((occ.sum(2) * model.success).sum())
    return Evaluation(
        expected_return=float((occ.sum(2) * model.rewards).sum()),
        expected_interventions=float(occ[..., 1].sum()),
        expected_success=success,
        occupancy=occ,
    )
