"""A model with two assumptions in place of per-step cells: a state's risk is the same at every step, and where an
episode goes next depends on the step alone.

    model = estimate_stationary(with_objective(transitions, "success"), smoothing=1.0)

``tabular_rl.estimate`` keeps one cell per (step, state, action) and pools across steps only as far as the data
show the steps alike. With 64 episodes and six bins that is about four rows a cell, and the solve under a cap
follows their noise. Many tasks that need help at the right moment have a simpler shape: what a state risks is
written in it (a dangerous crossing slips as often early as late), and what comes next is a new draw of the task,
not a consequence of the last step (the next crossing's risk does not depend on whether the expert said the
marker). Under those two assumptions the model needs, per (state, action), one failure rate and one early-win
rate estimated from every step's rows, and per step the distribution of the next step's states:

    P(fail | s, a)       = (F(s, a) + smoothing * F / N) / (N(s, a) + smoothing)         (every step's rows)
    P(win early | s, a)  = (W(s, a) + smoothing * W / N') / (N'(s, a) + smoothing)      (rows before the last step)
    P(s' | t, s, a)      = (1 - P(fail) - P(win early)) * next_t(s'),   next_t = states of step t + 1's rows
    at the last step     every episode ends; its expected credit is (1 - P(fail | s, a)) * the mean winning credit

with an end that pays nothing counted as a failure, an end that pays as a win. The timing the solve needs is
kept: the rapids ahead are in ``next_t``, which differs by step; what is pooled is only the risk of a state.

Where the assumptions fail (a game whose next room depends on the move; a late step riskier than an early one in
the same state) this model is wrong, and the helper's family keeps it only where it wins the training folds
(``tabular_rl.choice.selection``), read by a judge that pools nothing over steps (``tabular_rl.choice.judge``). It needs the
episode's success as the objective (``objective="success"``, no shaping): a failure is an end that pays nothing.
"""

from __future__ import annotations

import numpy as np

from .estimate import TabularModel, _check_actions, _shrink
from .transitions import Transitions


def _per_state(index: np.ndarray, mask: np.ndarray, S: int, A: int, weights: np.ndarray | None = None) -> np.ndarray:
    w = None if weights is None else weights[mask]
    return np.bincount(index[mask], weights=w, minlength=S * A).reshape(S, A).astype(np.float64)


def pooled_fail_rate(tr: Transitions, smoothing: float) -> np.ndarray:
    """P(the episode ends here as a failure | state, action), every step's rows pooled (states x actions)."""
    S, A = tr.n_states, 2
    failed = (tr.next_state == S) & (tr.reward <= 0)
    sa = tr.state * A + tr.action
    rows, fails = _per_state(sa, np.ones_like(failed), S, A), _per_state(sa, failed, S, A)
    return _shrink(fails, rows, fails.sum() / max(rows.sum(), 1.0), smoothing)


def estimate_stationary(tr: Transitions, *, smoothing: float = 1.0, discretizer=None,
                        fail_rate: np.ndarray | None = None) -> TabularModel:
    """The stationary model of ``tr`` (module docstring); ``tr.reward`` is the episode's success credit.
    ``fail_rate`` (steps x states x actions) replaces the pooled failure rate where the risk is modelled per step
    (``tabular_rl.smooth``)."""
    if smoothing < 0:
        raise ValueError(f"smoothing={smoothing}: must be >= 0")
    _check_actions(tr.action, "intervened")
    A, T, S = 2, tr.horizon, tr.n_states
    credit = tr.reward
    last = tr.step == T - 1
    ends = tr.next_state == S
    won_early = ends & ~last & (credit > 0)
    continuing = ~ends
    sa = tr.state * A + tr.action
    rows_early = _per_state(sa, ~last, S, A)
    wins = _per_state(sa, won_early, S, A)
    p_win = _shrink(wins, rows_early, wins.sum() / max(rows_early.sum(), 1.0), smoothing)
    p_fail = (np.broadcast_to(pooled_fail_rate(tr, smoothing), (T, S, A)) if fail_rate is None
              else np.asarray(fail_rate, dtype=np.float64))
    if p_fail.shape != (T, S, A):
        raise ValueError(f"fail_rate has shape {p_fail.shape}; expected (steps, states, actions) = {(T, S, A)}")
    end_early = np.minimum(1.0, p_fail + p_win)

    paying = ends & (credit > 0)
    win_credit = float(credit[paying].mean()) if paying.any() else 1.0
    continue_sum = _per_state(sa, continuing, S, A, credit)
    continue_rows = _per_state(sa, continuing, S, A)
    continue_mean = float(credit[continuing].mean()) if continuing.any() else 0.0
    continue_credit = _shrink(continue_sum, continue_rows, continue_mean, smoothing)

    transitions = np.zeros((T, S, A, S + 1))
    rewards = np.zeros((T, S, A))
    for t in range(T - 1):
        seen = np.bincount(tr.state[tr.step == t + 1], minlength=S).astype(np.float64)
        following = (seen + smoothing / S) / (seen.sum() + smoothing) if seen.sum() + smoothing > 0 else np.full(S, 1 / S)
        transitions[t, :, :, :S] = (1.0 - end_early[t])[..., None] * following
        transitions[t, :, :, S] = end_early[t]
        rewards[t] = p_win * win_credit + (1.0 - end_early[t]) * continue_credit
    transitions[T - 1, :, :, S] = 1.0
    rewards[T - 1] = (1.0 - p_fail[T - 1]) * win_credit

    first = tr.step == 0
    if not first.any():
        raise ValueError("no row has step == 0: the start distribution is estimated from step-0 rows")
    start = np.bincount(tr.state[first], minlength=S) / first.sum()
    counts = np.bincount((tr.step * S + tr.state) * A + tr.action, minlength=T * S * A).reshape(T, S, A)
    return TabularModel(transitions=transitions, rewards=rewards, start=start, success=rewards.copy(),
                        counts=counts, discretizer=discretizer, smoothing=float(smoothing),
                        n_truncated=tr.n_truncated)
