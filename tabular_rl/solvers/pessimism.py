"""Pessimism for thin data: an intervention is taken only where its own gain clears z standard errors.

The exact solve spends budget wherever an intervention's estimated gain is positive. Offline, a gain
estimated from few rows is noisy, and a score bin that mixes a few risky steps with many calm ones
has a small positive gain the solve spends on once the risky bins are covered (the plain-cue
example's interventions with no true gain, benchmarks/RESULTS.md). With ``pessimism`` z the exact
solve (``solve_exact``) takes an intervention at (step, state, budget left b) only where its own
gain, intervening now against giving the intervention up (both with b - 1 left after),

    Q_intervene(t, s, b) - Q_base(t, s, b - 1)  >  z * se(t, s),
    se(t, s) = half_range * sqrt(1 / n_eff(t, s, intervene) + 1 / n_eff(t, s, base)),

the standard error of a difference of two independent means: ``half_range`` bounds the standard
deviation of a backup whose target lies in a range of that half-width (0.5 for an episode's success
in [0, 1]; Popoviciu's inequality), and ``n_eff`` counts the rows an estimate rests on, the step's
own plus the step-pooled rows it borrows (``min(transition_backoff, N(s, a) - n_t)``, the back-off
weight, capped at the rows there are); an unseen cell counts one row. Where it clears, the point
estimates decide as before (now or later); where it does not, the agent acts. This is a lower
confidence bound on what the intervention does (pessimism in offline RL: Jin, Yang & Wang, 2021),
not on when: a price on every intervention (tried first) also delayed the ones whose gain is real
when the budget binds, and lost success at C = 1-2 on the plain-cue example.
"""

from __future__ import annotations

import numpy as np

from ..estimate import TabularModel

SUCCESS_HALF_RANGE = 0.5
"""Half the range of an episode's success (0 or 1): the largest standard deviation a backup can have."""


def effective_rows(model: TabularModel) -> np.ndarray:
    """(T, S, 2) rows behind each per-step estimate: its own plus the step-pooled rows it borrows."""
    if model.counts is None:
        raise ValueError("pessimism needs the model's counts: estimate it from data (tabular_rl.estimate)")
    own = model.counts.astype(float)
    borrowed = np.minimum(model.transition_backoff, model.counts.sum(0, keepdims=True) - own)
    return np.maximum(own + borrowed, 1.0)


def gain_standard_error(model: TabularModel, half_range: float = SUCCESS_HALF_RANGE) -> np.ndarray:
    """(T, S) standard error of an intervention's estimated gain at each (step, state) (see above)."""
    rows = effective_rows(model)
    return half_range * np.sqrt(1.0 / rows[..., 0] + 1.0 / rows[..., 1])


def check_pessimism(z: float) -> float:
    if not (np.isfinite(z) and z >= 0):
        raise ValueError(f"pessimism={z!r}: give a finite number of standard errors >= 0, e.g. --pessimism 1")
    return float(z)
