"""The priced family of a helper: its own training model solved with a price on each intervention.

    from helper.solve.priced_family import priced_members
    members = priced_members("runs/demo/helper", cap=3)   # [(price, Solution)], most help first

A helper solved for success within C spends all of C: an unspent intervention is worth nothing, so it also spends
the ones that gain little. The budget family C = Cmax, ..., 0 therefore lies below the helper's efficient frontier
(success against interventions spent) and jumps between budgets. Pricing each intervention at lambda (maximise
success - lambda * interventions, under the hard budget ``cap``) keeps only interventions that gain more than lambda:
as lambda rises from 0 the policies walk that frontier from the most help down (``tabular_rl.solve_exact`` with a
price; lambda = 0 is the C = cap solve itself).

Everything here is fixed by the helper folder alone, before any calibration episode is seen, as the fixed-sequence
test needs (``helper.gates.certify``): the model is re-estimated from the rows, discretizer and settings of the solve
folder the helper was distilled from (``helper.json`` ``labels_from``), the prices are ``PRICE_STEPS`` evenly spaced
from 0 to the lowest price at which the policy never intervenes (found by bisection on that model), and a price
whose policy equals a lower price's is the same gate and is left out. A member is played by the helper's table
backend (PRM score -> discretizer -> this table), not by a distilled classifier.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PRICE_STEPS = 41
"""Prices tried between 0 and the price that stops every intervention (equal policies are one member)."""
POLICY_FILE = "calibration/priced_policy.npz"
"""Where ``helpgate calibrate --family priced`` keeps the certified member's table, inside the helper folder."""
DISCRETIZER_FILE = "calibration/priced_discretizer.json"
"""The discretizer of the solve that table was solved on (kept beside it)."""


def training_model(helper_dir: str | Path):
    """(model, discretizer) of the solve the helper was distilled from, re-estimated with that solve's settings."""
    from helper.gates.helper_gate import CONFIG_FILE, resolve_recorded
    from helper.solve.solve_command import parse_backoff
    from tabular_rl import Discretizer, estimate
    from trajectories.shards import read_shard

    helper_dir = Path(helper_dir)
    config = json.loads((helper_dir / CONFIG_FILE).read_text())
    source = resolve_recorded(helper_dir, config, "labels_from")
    if not source or not (Path(source) / "solution.json").is_file():
        raise ValueError(f"{helper_dir}: the priced family needs the solve folder the helper was distilled from "
                         f"(helper.json labels_from: {source!r}, with solution.json); use --family budget.")
    source = Path(source)
    solved = json.loads((source / "solution.json").read_text()).get("config", {})
    if solved.get("advice_cost") is not None:
        raise ValueError(f"{source}: the helper was solved at an advice cost (priced, no budget); its family is its "
                         "one table: use --family budget.")
    rows = read_shard(source / "labels.parquet", require=("episode_id", "step", "prm_score"))
    discretizer = Discretizer.load(source / "discretizer.json")
    model = estimate(rows, discretizer, smoothing=solved.get("smoothing", 1.0),
                     backoff=parse_backoff(solved.get("backoff", "auto")),
                     objective=solved.get("objective", "success"), shaping=solved.get("shaping", 0.0))
    return model, discretizer


def stopping_price(model, cap: int, iterations: int = 40) -> float:
    """The lowest price (to bisection precision) at which the capped policy never intervenes."""
    from tabular_rl.solvers import solve_exact

    high = float(model.rewards.max() - model.rewards.min()) * model.horizon + 1.0  # no gain exceeds the span
    if solve_exact(model, cap, 0.0).expected_interventions == 0:
        return 0.0
    low = 0.0
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if solve_exact(model, cap, middle).expected_interventions > 0:
            low = middle
        else:
            high = middle
    return high


def priced_tables(model, cap: int, steps: int = PRICE_STEPS) -> list[tuple[float, object]]:
    """``[(price, Solution)]`` from price 0 up to the stopping price, one per distinct policy, most help first."""
    from tabular_rl.solvers import solve_exact

    if int(cap) < 0:
        raise ValueError(f"cap={cap}: the priced family's budget must be >= 0.")
    top = stopping_price(model, int(cap))
    members, seen = [], []
    for price in np.linspace(0.0, top, max(int(steps), 2)):
        solution = solve_exact(model, int(cap), float(price))
        if any(np.array_equal(solution.policy, p) for p in seen):
            continue
        seen.append(solution.policy)
        members.append((float(price), solution))
    return members


def priced_members(helper_dir: str | Path, cap: int, steps: int = PRICE_STEPS):
    """(members ``[(price, Solution)]``, discretizer) of a helper folder's priced family under budget ``cap``."""
    model, discretizer = training_model(helper_dir)
    return priced_tables(model, cap, steps), discretizer


def member_gate(helper, table, discretizer, cap: int, price: float | None = None):
    """The helper's table backend following ``table`` (its PRM scorer, its decide-after) under budget ``cap``;
    ``gate.price`` names the member (``serve-gate``'s /health compares it with the guarantee's)."""
    from helper.gates.helper_gate import HelperGate

    if helper.scorer is None:
        raise ValueError("the priced family is played by the solved table, which reads the PRM score: the helper's "
                         "PRM did not load (see the warning above); use --family budget.")
    gate = HelperGate("table", fallback=helper.fallback, scorer=helper.scorer, table=table, discretizer=discretizer,
                      budget=int(cap), solved_budget=int(cap), decide_after=helper.decide_after,
                      trained_on=helper.trained_on)
    gate.price = price
    gate.degraded, gate.horizon, gate.guarantee = helper.degraded, helper.horizon, helper.guarantee
    return gate


def keep_table(helper_dir: str | Path, table, discretizer) -> dict:
    """Save the certified member's table and its discretizer into the helper folder: ``{policy_file, policy_sha256,
    discretizer_sha256}`` for its record."""
    from helper.solve.solve_files import sha256

    helper_dir = Path(helper_dir)
    (helper_dir / POLICY_FILE).parent.mkdir(parents=True, exist_ok=True)
    table.save(helper_dir / POLICY_FILE)
    discretizer.save(helper_dir / DISCRETIZER_FILE)
    return {"policy_file": POLICY_FILE, "policy_sha256": sha256(helper_dir / POLICY_FILE),
            "discretizer_sha256": sha256(helper_dir / DISCRETIZER_FILE)}


def certified_gate(helper_dir: str | Path, **load):
    """The gate a helper folder's guarantee covers: ``HelperGate.load(dir, budget=C)`` for a budget member (a tiered
    helper's: at its cost budget B), the kept priced table for a priced one (its hash checked). ``load``:
    ``HelperGate.load``'s other arguments."""
    from helper.gates.helper_gate import HelperGate
    from helper.solve.solve_files import sha256
    from tabular_rl import Discretizer, Solution

    helper = HelperGate.load(helper_dir, **load)
    record = helper.guarantee
    if record is None:
        raise ValueError(f"{helper_dir}: no guarantee for these helper files; run `helpgate calibrate` first.")
    member = record["member"]
    if member.get("family", "budget") in ("budget", "tiered"):
        return helper.with_budget(member["budget"])
    for name, key in ((member["policy_file"], "policy_sha256"), (DISCRETIZER_FILE, "discretizer_sha256")):
        path = Path(helper_dir) / name
        if not path.is_file() or sha256(path) != member[key]:
            raise ValueError(f"{path}: missing or not the file the guarantee certified ({key} differs); re-run "
                             "`helpgate calibrate`.")
    discretizer = Discretizer.load(Path(helper_dir) / DISCRETIZER_FILE)
    table = Solution.load(Path(helper_dir) / member["policy_file"], discretizer)
    return member_gate(helper, table, discretizer, member["budget"], member["price"])
