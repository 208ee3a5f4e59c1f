"""Pessimism for thin data: every action's reward lowered by z standard errors of its estimate.

The exact solve spends budget wherever an intervention's estimated gain is positive. Offline, a gain
estimated from few rows is noisy, and a score bin that mixes a few risky steps with many calm ones
has a small positive gain the solve spends on once the risky bins are covered (the plain-cue
example's interventions with no true gain, benchmarks/RESULTS.md). Pessimistic value iteration
(Jin, Yang & Wang, "Is Pessimism Provably Efficient for Offline RL?", 2021) acts on the lower
confidence bound instead: each (step, state, action) loses

    z * half_range / sqrt(n_eff(t, s, a))

from its reward, where ``half_range`` bounds the standard deviation of a one-step backup whose
target lies in a range of that half-width (0.5 for an episode's success in [0, 1]; Popoviciu's
inequality), and ``n_eff`` counts the rows the estimate rests on: the step's own rows plus the
step-pooled rows it borrows (``min(transition_backoff, N(s, a) - n_t)``, the back-off weight,
capped at the rows there are). An unseen (step, state, action) counts one row. The penalty does
not depend on the values, so the pessimistic policy is the exact optimum of the penalised model
(the solvers and their tests apply unchanged); its success and interventions are then evaluated
on the unpenalised model.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .estimate import TabularModel

SUCCESS_HALF_RANGE = 0.5
"""Half the range of an episode's success (0 or 1): the largest standard deviation a backup can have."""


def effective_rows(model: TabularModel) -> np.ndarray:
    """(T, S, 2) rows behind each per-step estimate: its own plus the step-pooled rows it borrows."""
    if model.counts is None:
        raise ValueError("pessimism needs the model's counts: estimate it from data (tabular_rl.estimate)")
    own = model.counts.astype(float)
    borrowed = np.minimum(model.transition_backoff, model.counts.sum(0, keepdims=True) - own)
    return np.maximum(own + borrowed, 1.0)


def pessimistic(model: TabularModel, z: float, half_range: float = SUCCESS_HALF_RANGE) -> TabularModel:
    """``model`` with each reward lowered by ``z * half_range / sqrt(effective_rows)``."""
    if not (np.isfinite(z) and z >= 0):
        raise ValueError(f"pessimism={z!r}: give a finite number of standard errors >= 0, e.g. --pessimism 1")
    if z == 0:
        return model
    penalty = z * half_range / np.sqrt(effective_rows(model))
    return dataclasses.replace(model, rewards=model.rewards - penalty)
