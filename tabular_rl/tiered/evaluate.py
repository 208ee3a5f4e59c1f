"""Exact evaluation of a tiered policy table: values backward, occupancy forward, over (step, state, resources).

A table is a (T, S, R) integer array: the action (0 = agent, k = call kind k) at each step, state and
resource state (``Resources``). ``check_table`` refuses a table that takes an action it cannot
afford anywhere, reached or not, so an evaluated table is one that can never exceed a cap or the
budget. Each step is one matrix product per action over all states and resource states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mdp import TieredModel
from .resources import Resources


@dataclass
class TieredEvaluation:
    expected_return: float
    expected_success: float
    """NaN when the model carries no success table."""
    expected_cost: float
    """Expected spend per episode, in the user's unit of price."""
    expected_calls: np.ndarray
    """(K + 1,) expected times per episode each action is taken (index 0: the agent acting)."""
    occupancy: np.ndarray
    """(T, S, K + 1) probability of reaching (step, state) and taking each action, summed over resource states
    (kept per resource state it would be T * S * R * (K + 1) numbers, too many where the Lagrangian is used)."""


def check_table(table: np.ndarray, model: TieredModel, resources: Resources) -> np.ndarray:
    """``table`` as int64 after checking its shape and that every action in it is affordable where it stands."""
    table = np.asarray(table)
    expected = (model.horizon, model.n_states, resources.size)
    if table.shape != expected:
        raise ValueError(f"policy table has shape {table.shape}; expected {expected} (step, state, resource state)")
    if resources.n_kinds != model.n_kinds:
        raise ValueError(f"{resources.n_kinds} price(s) for a model of {model.n_kinds} kind(s) of help")
    table = table.astype(np.int64)
    if table.min() < 0 or table.max() > model.n_kinds:
        raise ValueError(f"policy table holds actions outside 0 .. {model.n_kinds}")
    after = resources.next_index()[table, np.arange(resources.size)]
    if (after < 0).any():
        t, s, r = (int(i[0]) for i in np.nonzero(after < 0))
        raise ValueError(f"policy table calls kind {int(table[t, s, r])} at step {t}, state {s} where resource state "
                         f"{resources.states()[r].tolist()} cannot afford it")
    return table


def table_values(model: TieredModel, resources: Resources, table: np.ndarray) -> np.ndarray:
    """V[t, s, r]: expected return-to-go of ``table``."""
    table = check_table(table, model, resources)
    T, S, R = table.shape
    nxt = resources.next_index()
    columns = np.arange(R)
    values = np.zeros((T, S, R))
    v_next = np.zeros((S, R))
    for t in range(T - 1, -1, -1):
        cont = model.transitions[t, :, :, :S] @ v_next  # (S, A, R): value after each action, resources unspent
        a = table[t]
        # The continuation after a is read at the resource state a moves to (affordable: checked above).
        values[t] = model.rewards[t][np.arange(S)[:, None], a] + cont[np.arange(S)[:, None], a, nxt[a, columns]]
        v_next = values[t]
    return values


def evaluate_table(model: TieredModel, resources: Resources, table: np.ndarray) -> TieredEvaluation:
    """Occupancy of ``table`` from the start distribution with all resources, and what it earns and spends."""
    table = check_table(table, model, resources)
    T, S, R = table.shape
    A = model.n_kinds + 1
    nxt = resources.next_index()
    occ = np.zeros((T, S, A))
    d = np.zeros((S, R))
    d[:, resources.full] = model.start
    for t in range(T):
        d_next = np.zeros((S, R))
        for a in range(A):
            x = np.where(table[t] == a, d, 0.0)
            occ[t, :, a] = x.sum(1)
            if t + 1 < T and x.any():
                go = model.transitions[t, :, a, :S].T @ x
                ok = nxt[a] >= 0  # unaffordable columns carry no mass (check_table)
                d_next[:, nxt[a, ok]] += go[:, ok]  # each action's move is one-to-one: no index repeats
        d = d_next
    calls = occ.sum((0, 1))
    success = np.nan if model.success is None else float((occ * model.success).sum())
    return TieredEvaluation(
        expected_return=float((occ * model.rewards).sum()),
        expected_success=success,
        expected_cost=float(calls @ resources.cost()) / resources.scale,
        expected_calls=calls,
        occupancy=occ,
    )
