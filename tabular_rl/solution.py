"""``Solution``: what every solver returns, plus its lookups and persistence."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .discretize import Discretizer


@dataclass
class Solution:
    """An intervention policy for budget ``budget`` and what it is expected to achieve.

    ``policy[t, s, b]`` is the probability of intervening at step ``t`` in state ``s``.
    With ``hard_budget`` (method ``exact``) the last axis is the budget left, ``b = 0 .. budget``,
    and the policy never intervenes at ``b = 0``. Otherwise (``lagrangian``, ``lp``: the budget
    holds in expectation) the last axis has length 1 and the policy ignores the budget left.
    ``values`` has the same shape: expected return-to-go.
    """

    method: str
    budget: int
    policy: np.ndarray
    values: np.ndarray
    hard_budget: bool
    expected_return: float
    """Expected sum of logged rewards per episode from the start distribution."""
    expected_success: float
    """Expected episode success (NaN when the data had no success column)."""
    expected_interventions: float
    """Expected interventions per episode from the start distribution."""
    discretizer: Discretizer | None = None
    lam: float | None = None
    """Lagrangian and LP: the price per intervention at which the budget binds (0 if it does not)."""
    policies: tuple[np.ndarray, np.ndarray] | None = None
    """Lagrangian: the two neighbouring deterministic (T, S) policies (more, fewer interventions)."""
    mix: float | None = None
    """Lagrangian: probability of running ``policies[0]`` for a whole episode (else ``policies[1]``).
    ``policy`` is the equivalent per-step stochastic policy (same occupancy, same value)."""

    @classmethod
    def evaluated(cls, model, method: str, budget: int, policy: np.ndarray, hard_budget: bool,
                  values: np.ndarray | None = None, lam: float | None = None) -> Solution:
        """The solution of ``policy`` on ``model``, with its expected return, success and
        interventions (and its values, unless the solver already has them)."""
        from .evaluate import evaluate, policy_values

        ev = evaluate(model, policy, budget, hard_budget=hard_budget)
        if values is None:
            values = policy_values(model, policy, hard_budget=hard_budget)
        return cls(method=method, budget=budget, policy=policy, values=values, hard_budget=hard_budget,
                   expected_return=ev.expected_return, expected_success=ev.expected_success,
                   expected_interventions=ev.expected_interventions, discretizer=model.discretizer, lam=lam)

    @property
    def horizon(self) -> int:
        return int(self.policy.shape[0])

    @property
    def n_states(self) -> int:
        return int(self.policy.shape[1])

    def cells(self, step, state) -> np.ndarray:
        """Flat (step, state) index per row; steps past the horizon use the last step."""
        t = np.clip(np.asarray(step, dtype=np.int64), 0, self.horizon - 1)
        return t * self.n_states + np.asarray(state, dtype=np.int64)

    def lookup(self, table: np.ndarray, cells: np.ndarray, budget_left) -> np.ndarray:
        """``table[t, s, b]`` per row for a policy-shaped ``table``; zero / False with no budget left.

        Budget left above ``budget`` is clipped to ``budget`` (a helper given C never holds more)."""
        b_left = np.asarray(budget_left, dtype=np.int64)
        idx = cells * (self.budget + 1) + np.clip(b_left, 0, self.budget) if self.hard_budget else cells
        return np.take(table.reshape(-1), idx) * (b_left > 0)

    def intervene_prob(self, step, state, budget_left) -> np.ndarray:
        """P(intervene) per row (see ``cells`` and ``lookup`` for out-of-range steps and budgets)."""
        return self.lookup(self.policy, self.cells(step, state), budget_left)

    def summary(self) -> dict:
        out = {
            "method": self.method,
            "budget": self.budget,
            "hard_budget": self.hard_budget,
            "expected_success": None if np.isnan(self.expected_success) else self.expected_success,
            "expected_return": self.expected_return,
            "expected_interventions": self.expected_interventions,
            "horizon": self.horizon,
            "n_states": self.n_states,
        }
        if self.lam is not None:
            out["lambda"] = self.lam
        if self.mix is not None:
            out["mix"] = self.mix
        return out

    def save(self, path: str | Path) -> None:
        """``.npz`` with ``policy``, ``values`` (and the Lagrangian pair) plus a JSON summary entry."""
        arrays = {"policy": self.policy, "values": self.values}
        if self.policies is not None:
            arrays |= {"policy_more": self.policies[0], "policy_fewer": self.policies[1]}
        np.savez_compressed(path, summary=np.array(json.dumps(self.summary())), **arrays)

    @classmethod
    def load(cls, path: str | Path, discretizer: Discretizer | None = None) -> Solution:
        """A saved solution; a truncated, corrupt or foreign file is refused naming it."""
        try:
            return cls._load(path, discretizer)
        except (OSError, EOFError) as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise ValueError(f"{path}: not a readable solution file ({type(error).__name__}: {error}); "
                             "solve again (helpgate solve) or distill again.") from error
        except (ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
            raise ValueError(f"{path}: not a readable solution file ({type(error).__name__}: {error}); "
                             "solve again (helpgate solve) or distill again.") from error

    @classmethod
    def _load(cls, path: str | Path, discretizer: Discretizer | None) -> Solution:
        with np.load(path, allow_pickle=False) as z:  # arrays and a JSON string only: never unpickle
            meta = json.loads(str(z["summary"]))
            pair = (z["policy_more"], z["policy_fewer"]) if "policy_more" in z else None
            return cls(
                method=meta["method"],
                budget=meta["budget"],
                policy=z["policy"],
                values=z["values"],
                hard_budget=meta["hard_budget"],
                expected_return=meta["expected_return"],
                expected_success=np.nan if meta["expected_success"] is None else meta["expected_success"],
                expected_interventions=meta["expected_interventions"],
                discretizer=discretizer,
                lam=meta.get("lambda"),
                policies=pair,
                mix=meta.get("mix"),
            )
