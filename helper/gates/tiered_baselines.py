"""The baselines of a helper that chooses which help to call (issue: tiered help), each a table a gate can play.

    solution = one_kind_solution(model, resources, "human")            # the helper with only that kind
    solution, name = best_cascade(model, cascade_risk(disc), ("compute", "human"), resources)
    gate = RandomKindGate(helper_solution, disc, scorer, budget=6)      # the helper's timing, a random kind

Every baseline is read under the same cost budget as the helper, fitted on the same rows and played the same way
(``helper.evaluation.tiered_sweep``; ``benchmarks/setups/tiered_rapids.py`` reads the same constructions exactly in
the known river):

- **one kind**: the tiered solve of the same estimated model with only that kind and the agent
  (``TieredModel.only``), its table written in the resource states of every kind so that the one gate plays it
  (``one_kind_solution``). Each kind's helper is a baseline of its own: the best of them is the user's best choice
  of a single help.
- **cascade**: the router users run today. A riskier state than ``t1`` calls the cheap tier, one riskier than
  ``t2`` the dear tier (the human), each only where the budget left and its cap afford it; with ``fallback`` a dear
  tier they cannot afford falls to the cheap one. ``t1 <= t2`` over every distinct risk of the states and "never",
  fallback on or off, chosen for the best estimated success under the budget in the estimated model (ties: the
  lower estimated spend): the same model, and so the same rows, the helper is solved on (``best_cascade``).
- **random kind**: the helper's own timing (it calls where its table calls, at the resource state the episode is
  in), the kind drawn uniformly among those the budget left affords, by a pure draw of the episode and step
  (``RandomKindGate``): what choosing the kind is worth, at about the helper's spend.
- **always the dearest kind**: the reference at the top, the named kind at every decision its budget and cap allow
  (``AlwaysKind``).
"""

from __future__ import annotations

import numpy as np

from agile.protocol import Observation
from agile.seeding import stable_uniform
from helper.gates.tiered_helper_gate import TieredHelperGate
from tabular_rl.discretize import Discretizer
from tabular_rl.tiered import Resources, TieredModel, TieredSolution, evaluate_table, solve_tiered

TIE = 1e-12


def one_kind_solution(model: TieredModel, resources: Resources, kind: str, method: str = "exact") -> TieredSolution:
    """The helper solved with only ``kind`` (and the agent) under ``resources``' budget and that kind's cap, as a
    table over ``resources``' states (the agent's action 0, ``kind`` its index among every kind)."""
    k = model.kind_index(kind)
    own = Resources(prices=(resources.prices[k - 1],), budget=resources.budget, caps=(resources.caps[k - 1],),
                    scale=resources.scale)
    solved = solve_tiered(model.only([kind]), own, method)
    states = resources.states()  # (R, 1 + capped): budget left, calls left of each capped kind
    calls = {1: states[:, 1 + resources.capped.index(k)]} if k in resources.capped else {}
    mapped = own.index(states[:, 0], calls)
    tables = [np.where(table[:, :, mapped] > 0, k, 0) for table in solved.tables]
    return TieredSolution.evaluated(model, resources, f"one kind: {kind}", tables, solved.mix)


def cascade_risk(discretizer: Discretizer) -> np.ndarray:
    """(S,) how risky each state of ``discretizer`` reads, for a cascade: minus its score bin (a lower verifier score
    is a likelier failure), NaN for the unknown state (no score: the agent acts)."""
    states = np.arange(discretizer.n_states)
    score_bin, _ = discretizer.split(states)
    risk = -score_bin.astype(float)
    risk[score_bin == discretizer.unknown_bin] = np.nan
    return risk


def cascade_table(risk: np.ndarray, t1: float, t2: float, tiers: tuple[int, int], resources: Resources,
                  horizon: int, fallback: bool) -> np.ndarray:
    """(T, S, R): risk >= t2 calls ``tiers[1]``, else risk >= t1 calls ``tiers[0]`` (actions 1 .. K), each only where
    the resource state affords it (budget left and cap); with ``fallback`` a dear tier the resource state cannot
    afford falls to the cheap tier."""
    low, high = tiers
    after = resources.next_index()
    pays_low, pays_high = after[low] >= 0, after[high] >= 0
    with np.errstate(invalid="ignore"):  # NaN risk (no score): the agent acts
        at_high, at_low = (risk >= t2)[:, None], (risk >= t1)[:, None]
    act = np.where(at_high & pays_high, high, np.where((at_low & ~at_high | at_high & fallback) & pays_low, low, 0))
    return np.broadcast_to(act, (horizon, *act.shape)).copy()


def best_cascade(model: TieredModel, risk: np.ndarray, tiers: tuple[str, str],
                 resources: Resources) -> tuple[TieredSolution, str]:
    """The cascade with the best estimated success under ``resources`` in ``model`` (module docstring), and its
    description: ``t1/t2`` (``-`` never) and ``f`` with fallback."""
    actions = (model.kind_index(tiers[0]), model.kind_index(tiers[1]))
    grid = [*np.unique(risk[~np.isnan(risk)]), np.inf]
    best = None
    for i, t1 in enumerate(grid):
        for t2 in grid[i:]:
            for fallback in (False, True):
                table = cascade_table(risk, t1, t2, actions, resources, model.horizon, fallback)
                run = evaluate_table(model, resources, table)
                key = (run.expected_success, -run.expected_cost)
                if best is None or key[0] > best[0][0] + TIE or (key[0] >= best[0][0] - TIE and key[1] > best[0][1]):
                    name = "/".join("-" if np.isinf(t) else f"{t:.2f}" for t in (t1, t2)) + ("f" if fallback else "")
                    best = (key, table, name)
    return TieredSolution.evaluated(model, resources, f"cascade {best[2]}", [best[1]]), best[2]


class RandomKindGate(TieredHelperGate):
    """The helper's timing with the kind drawn uniformly among the affordable ones (module docstring)."""

    def pick_scored(self, observation: Observation, budget_left: float, calls_left: dict,
                    proposal=None) -> tuple[str | None, float | None]:
        kind, score = super().pick_scored(observation, budget_left, calls_left, proposal)
        if kind is None:
            return None, score
        ok = self.affordable(budget_left, calls_left)
        draw = stable_uniform("random-kind", observation.episode_id, observation.step)
        return ok[min(int(draw * len(ok)), len(ok) - 1)], score


class AlwaysKind:
    """The reference at the top: the named kind at every decision its budget and cap allow."""

    decide_after = "state"

    def __init__(self, kinds: tuple[str, ...], kind: str):
        self.kinds, self.kind = kinds, kind

    def choose(self, observation, budget_left=None, calls_left=None, proposal=None) -> str:
        return self.kind
