"""``TieredSolution``: what the tiered solvers return, and the lookup a gate makes with it.

One or two deterministic tables over (step, state, resource state). The exact solver returns one;
the Lagrangian returns the two neighbouring tables of its price and plays ``tables[0]`` for a whole
episode with probability ``mix`` (else ``tables[1]``), which spends its target in expectation. Every
table is checked affordable where it stands (``evaluate.check_table``), so whichever is played, no
episode exceeds a cap or the budget.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .mdp import TieredModel
from .resources import Resources


@dataclass
class TieredSolution:
    method: str
    kinds: tuple[str, ...]
    resources: Resources
    tables: tuple[np.ndarray, ...]
    """Each (T, S, R): the action at (step, state, resource state); 0 = the agent acts, k = call ``kinds[k - 1]``."""
    mix: float
    """Probability of playing ``tables[0]`` for a whole episode (1 with a single table)."""
    expected_return: float
    expected_success: float
    expected_cost: float
    """Expected spend per episode, in the user's unit of price."""
    expected_calls: np.ndarray
    """(K + 1,) expected times per episode each action is taken."""
    values: np.ndarray | None = None
    """(T, S, R) return-to-go of ``tables[0]`` (the exact solver's optimal values)."""
    lam: float | None = None
    """Lagrangian: the price multiplier on cost (per cost unit of the user's price)."""

    @classmethod
    def evaluated(cls, model: TieredModel, resources: Resources, method: str, tables, mix: float = 1.0,
                  values: np.ndarray | None = None, lam: float | None = None) -> TieredSolution:
        from .evaluate import evaluate_table

        tables = tuple(tables)
        runs = [evaluate_table(model, resources, table) for table in tables]
        weights = (mix, 1.0 - mix) if len(tables) == 2 else (1.0,)

        def mean(attr):
            return sum(w * getattr(run, attr) for w, run in zip(weights, runs))

        return cls(method=method, kinds=model.kinds, resources=resources, tables=tables, mix=float(mix),
                   expected_return=float(mean("expected_return")), expected_success=float(mean("expected_success")),
                   expected_cost=float(mean("expected_cost")), expected_calls=mean("expected_calls"),
                   values=values, lam=lam)

    @property
    def horizon(self) -> int:
        return int(self.tables[0].shape[0])

    def action(self, step, state, budget_left, calls_left: dict | None = None, table: int = 0) -> np.ndarray:
        """Action per row (0 = agent, k = kind k) at ``budget_left`` (the user's unit) and, per capped kind
        (by name or index 1 .. K), its calls left. Steps past the horizon read the last step."""
        units = np.floor(np.asarray(budget_left, dtype=float) * self.resources.scale + 1e-9).astype(np.int64)
        by_index = {self.kinds.index(k) + 1 if isinstance(k, str) else int(k): n for k, n in (calls_left or {}).items()}
        r = self.resources.index(units, by_index)
        t = np.clip(np.asarray(step, dtype=np.int64), 0, self.horizon - 1)
        return self.tables[table][t, np.asarray(state, dtype=np.int64), r]

    def kind(self, step: int, state: int, budget_left: float, calls_left: dict | None = None,
             table: int = 0) -> str | None:
        """The kind of help to call at one decision point, or None to let the agent act."""
        a = int(self.action(step, state, budget_left, calls_left, table))
        return None if a == 0 else self.kinds[a - 1]

    def save(self, path: str | Path) -> None:
        """``.npz`` of the tables (and values) with a JSON entry for the rest: arrays and text, never a pickle."""
        meta = {"method": self.method, "kinds": list(self.kinds), "resources": asdict(self.resources), "mix": self.mix,
                "expected_return": self.expected_return, "expected_success": self.expected_success,
                "expected_cost": self.expected_cost, "expected_calls": self.expected_calls.tolist(), "lam": self.lam}
        arrays = {"tables": np.stack(self.tables)} | ({} if self.values is None else {"values": self.values})
        np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> TieredSolution:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            resources = meta.pop("resources")
            return cls(**meta | {"kinds": tuple(meta["kinds"]), "expected_calls": np.array(meta["expected_calls"])},
                       resources=Resources(prices=tuple(resources["prices"]), budget=resources["budget"],
                                           caps=tuple(resources["caps"]), scale=resources["scale"]),
                       tables=tuple(z["tables"]), values=z["values"] if "values" in z else None)

    def summary(self) -> dict:
        return {
            "method": self.method,
            "kinds": list(self.kinds),
            "prices": [p / self.resources.scale for p in self.resources.prices],
            "budget": self.resources.budget / self.resources.scale,
            "caps": list(self.resources.caps),
            "expected_success": None if np.isnan(self.expected_success) else self.expected_success,
            "expected_return": self.expected_return,
            "expected_cost": self.expected_cost,
            "expected_calls": dict(zip(("agent", *self.kinds), self.expected_calls.tolist())),
            "mix": self.mix,
            **({"lambda": self.lam} if self.lam is not None else {}),
        }
