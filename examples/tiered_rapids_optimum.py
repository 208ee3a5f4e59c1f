"""The exact optimum of ``examples.tiered_rapids`` under each cost budget, and the best helper of one kind.

    from examples.tiered_rapids_optimum import best_one_kind, optimum, true_model
    optimum(budget=6)          # (0.517, 4.22): the best success any helper reaches spending at most 6 per episode
    best_one_kind(budget=6)    # {'compute': 0.390, 'stronger': 0.474, 'human': 0.301}

The risks are independent across crossings and a lost crossing ends the episode, so (crossing, risk,
budget left) is all a helper needs to know: ``optimum`` is backward induction over it in plain
Python, computed from the known dynamics (the odds of each risk word per crossing, the agent's
slips and each kind's catch), not from data. A tie goes to the cheaper action, the agent first.
``true_model`` is the same dynamics as a ``tabular_rl.tiered.TieredModel`` (states: the risk words),
so a table solved from logged rows can be evaluated exactly in the true river. ``evaluate_randomised``
evaluates exactly a table that draws its action (``tabular_rl.tiered.evaluate_table`` takes one action per
entry): the random-kind baseline of ``benchmarks/setups/tiered_rapids.py``.
"""

from __future__ import annotations

import numpy as np

from examples.rapids import risk_odds_by_step
from examples.tiered_rapids import HORIZON, KINDS, RISKS, SLIP, Help

__all__ = ["best_one_kind", "crossing_odds", "evaluate_randomised", "optimum", "true_model"]

# Decimal odds (0.3, 0.7, ...) reach equal values along different sums that differ in their last
# bits: a dearer action must win by more than that (as in ``examples.rapids_optimum``).
TIE = 1e-12


def crossing_odds(risk: str, help: Help | None) -> float:
    """Probability of making a crossing of ``risk``: the agent alone, or with ``help`` catching its slip."""
    return 1.0 - SLIP[risk] * (1.0 - (help.fix if help else 0.0))


def _whole(price: float) -> int:
    if float(price) != int(price) or price < 0:
        raise ValueError(f"price {price!r}: this optimum counts the budget in whole units; give whole prices")
    return int(price)


def optimum(budget: int, kinds: dict[str, Help] = KINDS, horizon: int = HORIZON) -> tuple[float, float]:
    """(best success, expected spend of the best helper) with at most ``budget`` spent per episode."""
    budget = _whole(budget)
    helps = sorted(kinds.values(), key=lambda h: h.price)  # cheaper first: a tie keeps the cheaper
    value, spent = [1.0] * (budget + 1), [0.0] * (budget + 1)  # after the last crossing, per budget left
    for odds in reversed(risk_odds_by_step(horizon)):
        new_value, new_spent = [0.0] * (budget + 1), [0.0] * (budget + 1)
        for left in range(budget + 1):
            for risk, p in odds.items():
                keep = crossing_odds(risk, None)
                best = (keep * value[left], keep * spent[left])
                for help in helps:
                    price = _whole(help.price)
                    if price <= left:
                        made = crossing_odds(risk, help)
                        candidate = (made * value[left - price], price + made * spent[left - price])
                        if candidate[0] > best[0] + TIE * (1.0 + abs(best[0])):
                            best = candidate
                new_value[left] += p * best[0]
                new_spent[left] += p * best[1]
        value, spent = new_value, new_spent
    return value[budget], spent[budget]


def best_one_kind(budget: int, horizon: int = HORIZON) -> dict[str, float]:
    """Per kind, the best success of a helper that may call only that kind under the same budget."""
    return {name: optimum(budget, {name: help}, horizon)[0] for name, help in KINDS.items()}


def true_model(horizon: int = HORIZON):
    """The dynamics as a ``TieredModel``: state = the crossing's risk word; return = success (1 at the end)."""
    from tabular_rl.tiered import TieredModel

    S, K = len(RISKS), len(KINDS)
    odds = np.array([[step[r] for r in RISKS] for step in risk_odds_by_step(horizon)])
    made = np.array([[crossing_odds(r, h) for h in (None, *KINDS.values())] for r in RISKS])  # (S, K + 1)
    transitions = np.zeros((horizon, S, K + 1, S + 1))
    for t in range(horizon - 1):  # made: on to the next crossing, whose risk follows its odds; lost: the end
        transitions[t, :, :, :S] = made[:, :, None] * odds[t + 1][None, None, :]
        transitions[t, :, :, S] = 1.0 - made
    transitions[horizon - 1, :, :, S] = 1.0
    rewards = np.zeros((horizon, S, K + 1))
    rewards[horizon - 1] = made  # success is credited when the last crossing is made
    return TieredModel(transitions=transitions, rewards=rewards, start=odds[0].copy(), kinds=tuple(KINDS),
                       success=rewards.copy())


def evaluate_randomised(model, resources, policy) -> tuple[float, float, np.ndarray]:
    """(expected success, expected spend, expected calls of each action) of a randomised table, exactly.

    ``policy[t, s, r, a]`` is the probability of action ``a`` (0 = the agent, k = kind k) at step ``t``, state ``s``
    and resource state ``r`` of ``resources`` (a ``tabular_rl.tiered.Resources``). A policy that gives any
    probability to an action it cannot afford there, reached or not, is refused, so no episode exceeds the budget.
    The occupancy is carried forward over (state, resource state), each action's share moved to the resource state
    it leads to, as ``evaluate_table`` does for one action per entry."""
    T, S, A, R = model.horizon, model.n_states, model.n_kinds + 1, resources.size
    policy = np.asarray(policy, dtype=float)
    if policy.shape != (T, S, R, A):
        raise ValueError(f"policy has shape {policy.shape}; expected {(T, S, R, A)} (step, state, resource, action)")
    if (policy < 0).any() or not np.allclose(policy.sum(-1), 1.0):
        raise ValueError("policy: each (step, state, resource state) needs probabilities >= 0 that sum to 1")
    nxt = resources.next_index()  # (A, R), -1 where unaffordable
    if (policy[..., (nxt < 0).T] > 0).any():
        raise ValueError("policy gives probability to an action it cannot afford")
    success = model.rewards if model.success is None else model.success
    d = np.zeros((S, R))
    d[:, resources.full] = model.start
    won, calls = 0.0, np.zeros(A)
    for t in range(T):
        d_next = np.zeros((S, R))
        for a in range(A):
            x = d * policy[t, :, :, a]
            calls[a] += x.sum()
            won += float(x.sum(1) @ success[t, :, a])
            ok = nxt[a] >= 0
            if t + 1 < T and ok.any():
                d_next[:, nxt[a, ok]] += (model.transitions[t, :, a, :S].T @ x)[:, ok]
        d = d_next
    return won, float(calls @ resources.cost()) / resources.scale, calls
