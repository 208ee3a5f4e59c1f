"""The exact budgeted optimum of ``examples.plain_cue``, by brute force over its true dynamics.

    from examples.plain_cue_optimum import optimum
    success, interventions = optimum(budget=2)

``optimum`` walks the whole tree of risk words an episode can show (3 ** horizon histories) and
takes, at every node, the better of letting the agent cross and intervening: the best success any
gate that sees the state texts can reach with at most ``budget`` interventions, and the expected
interventions of that best gate when a tie goes to the agent. It assumes nothing about which
summary of the history suffices. ``policy_search`` is a second, slower brute force for tiny
instances: every deterministic policy over (crossing, risk, budget left), each evaluated on every
risk sequence. ``true_model`` is the same dynamics as a ``tabular_rl.TabularModel`` (states: the
risk words), for the solver and for the reference gate (``optimal_gate``).

``SureFootedAgent`` and ``expected_outcome`` evaluate any gate in expectation over the slips: the
gate plays beside an agent that never slips, which walks every path the real agent can reach with
the same history (a slip ends the episode, so a path that reaches a crossing holds only right
answers), and each episode's success is its exact probability under the real agent.
"""

from __future__ import annotations

import itertools

import numpy as np

from examples.plain_cue import HORIZON, RISK_ODDS, SLIP, CrossingAgent

RISKS = tuple(RISK_ODDS)


def optimum(budget: int, horizon: int = HORIZON) -> tuple[float, float]:
    """(best success, expected interventions of the best gate, ties to the agent) with ``budget``."""

    def node(t: int, left: int) -> tuple[float, float]:
        # Expectation over this crossing's risk word, then the better action given it. No memo on
        # purpose: every history is its own subtree.
        if t == horizon:
            return 1.0, 0.0
        value = spent = 0.0
        for risk in RISKS:
            go_on, go_on_spent = node(t + 1, left)
            cross = ((1.0 - SLIP[risk]) * go_on, (1.0 - SLIP[risk]) * go_on_spent)
            best = cross
            if left:
                helped, helped_spent = node(t + 1, left - 1)
                if helped > cross[0]:
                    best = (helped, 1.0 + helped_spent)
            value += RISK_ODDS[risk] * best[0]
            spent += RISK_ODDS[risk] * best[1]
        return value, spent

    return node(0, int(budget))


def policy_search(budget: int, horizon: int) -> float:
    """Best success over every deterministic (crossing, risk, budget left) -> intervene policy."""
    cells = [(t, r, b) for t in range(horizon) for r in RISKS for b in range(1, budget + 1)]
    sequences = [(seq, float(np.prod([RISK_ODDS[r] for r in seq]))) for seq in itertools.product(RISKS, repeat=horizon)]
    best = 0.0
    for choice in itertools.product((False, True), repeat=len(cells)):
        policy = dict(zip(cells, choice))
        value = 0.0
        for seq, weight in sequences:
            left, survive = budget, 1.0
            for t, risk in enumerate(seq):
                if left and policy[(t, risk, left)]:
                    left -= 1
                else:
                    survive *= 1.0 - SLIP[risk]
            value += weight * survive
        best = max(best, value)
    return best


def true_model(horizon: int = HORIZON):
    """The dynamics as a ``TabularModel``: state = the crossing's risk word; return = success."""
    from tabular_rl import TabularModel

    S = len(RISKS)
    odds = np.array([RISK_ODDS[r] for r in RISKS])
    slip = np.array([SLIP[r] for r in RISKS])
    transitions = np.zeros((horizon, S, 2, S + 1))
    transitions[:, :, 0, :S] = (1.0 - slip)[:, None] * odds[None, :]
    transitions[:, :, 0, S] = slip
    transitions[:, :, 1, :S] = odds
    transitions[horizon - 1] = 0.0
    transitions[horizon - 1, :, :, S] = 1.0
    rewards = np.zeros((horizon, S, 2))
    rewards[horizon - 1, :, 0] = 1.0 - slip  # success is credited when the last crossing is made
    rewards[horizon - 1, :, 1] = 1.0
    return TabularModel(transitions=transitions, rewards=rewards, start=odds.copy(), success=rewards.copy())


def optimal_gate(budget: int, horizon: int = HORIZON):
    """The exact optimum as a gate: backward induction on ``true_model``, reading the risk annotation."""
    from helper.gates.exact_optimal import exact_optimal_gate

    return exact_optimal_gate(true_model(horizon), RISKS, lambda o: o.annotations.get("risk"), budget)


class SureFootedAgent(CrossingAgent):
    """The base agent without its slips (module docstring)."""

    def _answer(self, observation) -> int:
        return int(self._marker.search(observation.state_text).group(1))


def expected_outcome(risks: list[str], intervened: list[bool]) -> tuple[float, float]:
    """(success probability, expected interventions) of an episode under the real agent, given where a gate
    intervened on the sure-footed path: each crossing left to the agent is made with 1 - its slip
    probability, and an intervention counts with the probability of reaching it."""
    reach, used = 1.0, 0.0
    for risk, helped in zip(risks, intervened):
        used += reach * helped
        reach *= 1.0 if helped else 1.0 - SLIP[risk]
    return reach, used
