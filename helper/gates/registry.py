"""``GATES``: every gate a user, the sweep or ``agile eval`` can build, by the name its rows carry.

A name maps to its class, imported on first use so that reading the registry costs no torch, gymnasium or
stable-baselines3. The sweep's methods (``helper.evaluation.methods.METHODS``) each name the entry they build
(``Method.gate``), and the sweep checks every gate a method plays is of that class; ``agile eval --gate`` builds
its built-in gates from here too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

_PLACES = {
    "never": "simple:NeverGate",
    "always": "simple:AlwaysGate",
    "first_k": "simple:FirstKGate",
    "random": "simple:RandomGate",
    "uniform": "simple:UniformGate",
    "novelty": "simple:NoveltyGate",
    "not_yes_no": "simple:PhrasingGate",
    "threshold": "simple:ScoreThresholdGate",
    "oracle": "simple:OracleGate",
    "table": "simple:TableGate",
    "helper": "helper_gate:HelperGate",
    "tiered_helper": "tiered_helper_gate:TieredHelperGate",
    "online_rl": "online_rl:OnlineRLGate",
    "random_kind": "tiered_baselines:RandomKindGate",
    "always_kind": "tiered_baselines:AlwaysKind",
}


class _Registry(Mapping):
    """Name -> gate class, each imported when first looked up."""

    def __getitem__(self, name: str) -> type:
        if name not in _PLACES:
            raise KeyError(f"{name!r} is no gate; choose from {', '.join(_PLACES)}.")
        module, cls = _PLACES[name].split(":")
        return getattr(importlib.import_module(f"helper.gates.{module}"), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_PLACES)

    def __len__(self) -> int:
        return len(_PLACES)


GATES: Mapping[str, type] = _Registry()
"""Every gate class by name (module docstring)."""
