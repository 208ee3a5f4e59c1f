"""Pessimism for thin data: an intervention is taken only where its gain clears z standard errors.

The exact solve spends budget wherever an intervention's estimated gain is positive. Offline, a gain
estimated from few rows is noisy, and a score bin that mixes a few risky steps with many calm ones
has a small positive gain the solve spends on once the risky bins are covered (the plain-cue
example's interventions with no true gain, benchmarks/RESULTS.md). Acting on a lower confidence
bound instead (pessimism in offline RL: Jin, Yang & Wang, "Is Pessimism Provably Efficient for
Offline RL?", 2021), each (step, state) prices its intervention at z standard errors of the gain's
estimate, the difference of two independent means:

    price(t, s) = z * half_range * sqrt(1 / n_eff(t, s, intervene) + 1 / n_eff(t, s, base))

``half_range`` bounds the standard deviation of a one-step backup whose target lies in a range of
that half-width (0.5 for an episode's success in [0, 1]; Popoviciu's inequality), and ``n_eff``
counts the rows an estimate rests on: the step's own rows plus the step-pooled rows it borrows
(``min(transition_backoff, N(s, a) - n_t)``, the back-off weight, capped at the rows there are);
an unseen cell counts one row. Penalising the gain rather than each action's value (PEVI's form)
matters where both actions are logged about equally often: their penalties then nearly cancel and
a thin gain passes. The price does not depend on the values, so the pessimistic policy is the exact
optimum of the priced model (the solvers and their tests apply unchanged); its success and
interventions are evaluated on the unpriced model.
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
    """``model`` with each intervention's reward lowered by z standard errors of its gain (see above)."""
    if not (np.isfinite(z) and z >= 0):
        raise ValueError(f"pessimism={z!r}: give a finite number of standard errors >= 0, e.g. --pessimism 1")
    if z == 0:
        return model
    rows = effective_rows(model)
    rewards = model.rewards.copy()
    rewards[..., 1] -= z * half_range * np.sqrt(1.0 / rows[..., 0] + 1.0 / rows[..., 1])
    return dataclasses.replace(model, rewards=rewards)
