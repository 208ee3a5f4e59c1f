"""What a helper was trained on, and the one check that it is used on the same kind of episodes.

``helpgate distill`` stores ``trained_on`` in ``helper.json``: the env name(s) of the logged rows,
the longest episode (horizon), the largest budget the labels were solved for, the solve method and,
for a priced solve, the advice cost. ``HelperGate`` compares its first observation (and its own
budget) with it, once:

- a larger budget, a longer horizon or another env name: one ``warnings.warn`` naming every field
  that differs (the classifier then extrapolates beyond what it learned);
- observation features the helper reads (``f_<key>`` inputs) none of which the observation has:
  ``ValueError`` (every such input would be missing, so the decision would mean nothing).

A priced helper (``method`` priced: advice at cost c, no budget) is not compared on budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from agile.protocol import Observation

PRICED = "priced"


def trained_on(logged: pl.DataFrame, solution, advice_cost: float | None) -> dict:
    """The ``trained_on`` record of a helper distilled from ``logged`` rows and ``solution``."""
    if "horizon" in logged.columns and logged["horizon"].null_count() == 0:
        horizon = int(logged["horizon"].max())
    else:
        horizon = int(logged["step"].max()) + 1
    envs = sorted(logged["env"].unique().to_list()) if "env" in logged.columns else []
    out = {"env": envs, "horizon": horizon, "budget": int(solution.budget), "method": solution.method}
    if advice_cost is not None:
        out["advice_cost"] = float(advice_cost)
    return out


def describe(trained: dict) -> str:
    budget = "no budget (priced)" if trained.get("method") == PRICED else f"budget <= {trained.get('budget')}"
    envs = "/".join(trained.get("env") or ["?"])
    return f"helper trained for {budget} on env {envs} with horizon {trained.get('horizon')}"


def mismatch(trained: dict, observation: Observation, budget: int | None,
             feature_names: Sequence[str] = ()) -> str | None:
    """The warning text when this use differs from ``trained`` (None when it matches).

    Raises ``ValueError`` when the helper reads observation features and the observation has none
    of them. A helper without a record (saved before ``trained_on`` existed) is not checked at all:
    nothing says what it was meant for.
    """
    if not trained:
        return None
    wanted = [name[2:] for name in feature_names if name.startswith("f_")]
    have = set(observation.features or {})
    if wanted and not have.intersection(wanted):
        raise ValueError(f"{describe(trained)} reads the observation features {wanted}, and this observation "
                         f"(env {observation.env}) has none of them (it has {sorted(have)}); distill a helper "
                         "from trajectories of this environment.")
    differs = []
    envs = trained.get("env") or []
    if envs and observation.env not in envs:
        differs.append("env")
    if trained.get("horizon") is not None and observation.horizon > trained["horizon"]:
        differs.append("horizon")
    if trained.get("method") != PRICED and budget is not None and trained.get("budget") is not None \
            and budget > trained["budget"]:
        differs.append("budget")
    missing = [k for k in wanted if k not in have]
    if missing:
        differs.append(f"features {missing} missing")
    if not differs:
        return None
    used = f"used with budget {budget} on env {observation.env} with horizon {observation.horizon}"
    return (f"{describe(trained)}; {used}. Differs: {', '.join(differs)}; its decisions here extrapolate "
            "beyond what it learned.")
