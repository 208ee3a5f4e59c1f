"""The exact optimum where the true model is known: ProductQA's simulator agent with no memory boost.

``simulator_model`` builds the simulator's true budgeted MDP; ``exact_optimal_gate`` solves it by
backward induction (``tabular_rl.solve_exact``) and follows the solution as an ``helper.gates.simple.TableGate``
(the sweep's ``exact_optimal`` row).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from helper.gates.simple import TableGate
from agile.protocol import Observation


def simulator_model(sessions, accuracy: Mapping[str, float], types: tuple[str, ...], horizon: int):
    """The true budgeted MDP of the simulator agent (no memory boost), as a ``TabularModel``.

    State at step ``t`` = the type of question ``t``; base reward = the agent's accuracy on that
    type, intervention reward = 1 (the expert is right); the next question's type follows the
    exact distribution of the split's sessions (``sessions``: (types, probability) pairs, e.g.
    ``Environment.type_sequences()``), summarised per step as P(type_{t+1} | t, type_t).
    """
    from tabular_rl import TabularModel

    S, T = len(types), int(horizon)
    index = {name: i for i, name in enumerate(types)}
    start = np.zeros(S)
    follow = np.zeros((T, S, S + 1))
    for sequence, weight in sessions:
        states = [index[name] for name in sequence]
        start[states[0]] += weight
        for t, state in enumerate(states):
            nxt = states[t + 1] if t + 1 < len(states) else S  # S: the episode is over
            follow[t, state, nxt] += weight
    mass = follow.sum(-1, keepdims=True)
    # Unreachable (step, type) cells get "episode over"; they never occur, any valid row would do.
    terminal = np.zeros(S + 1)
    terminal[S] = 1.0
    follow = np.where(mass > 0, follow / np.where(mass > 0, mass, 1.0), terminal)
    follow[T - 1] = terminal
    transitions = np.repeat(follow[:, :, None, :], 2, axis=2)
    rewards = np.zeros((T, S, 2))
    rewards[:, :, 0] = [float(accuracy[name]) for name in types]
    rewards[:, :, 1] = 1.0
    return TabularModel(transitions=transitions, rewards=rewards, start=start / start.sum())


def exact_optimal_gate(model, types: tuple[str, ...], type_of: Callable[[Observation], str | None],
                       budget: int) -> TableGate:
    """Backward induction on the true model (``tabular_rl.solve_exact``), followed as a gate."""
    from tabular_rl import solve_exact

    index = {name: i for i, name in enumerate(types)}

    def state_of(observation: Observation) -> int:
        name = type_of(observation)
        if name not in index:
            raise ValueError(f"observation {observation.task_id!r} has question type {name!r}; the exact "
                             f"model knows {list(types)}")
        return index[name]

    return TableGate(solve_exact(model, budget), state_of, budget, name="exact_optimal")
