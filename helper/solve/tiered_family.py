"""The tiered family of ``helpgate calibrate``: a tiered helper (several kinds of help, each at its price) at each
cost budget its solved table holds, most help first, and how each member plays the calibration episodes.

    from helper.solve.tiered_family import budgets, play
    budgets(helper)                              # [6, 5, 4, 3, 2, 1, 0]: the solved B down to 0, in cost units
    rows = play(episodes, base, helps, helper.with_budget(4), 4, seed=2000)   # one row per episode

A tiered helper folder (``helper.gates.tiered_helper_gate``) keeps the table solved at its largest cost budget B
(``helper.json`` ``cost_budget``). That table reads the budget left at every decision, so it holds the policy of
every smaller budget too: the exact solve's table at budget left b is the optimum under b (a Lagrangian mixture's is
its own rule at b). The family is the helper at B, B - u, ..., u, 0, where u is the table's cost unit (1 for whole
prices; 1/scale for prices with decimals, ``tabular_rl.tiered.cost_units``): fixed by the helper folder alone,
before any calibration episode is played, as the fixed-sequence test needs (``helper.gates.certify``).

Each member plays the calibration episodes with the folder's kinds at their prices and caps
(``agile.rollout.run_episodes(..., helps=..., budget=B)``; a kind with no agent of its own is the episode's own
expert of that kind). The loop asks the gate's ``choose`` with the episode's exact cost and calls left; the gate's own
count and the loop's hold the same prices, budget and caps, so neither lets an episode spend past B or call a kind
past its cap.
"""

from __future__ import annotations

from fractions import Fraction

FAMILY = "tiered"
"""The ``family`` a tiered guarantee and its members record."""
CALLS = "calls_"
"""Prefix of the per-kind call columns of ``calibration/episodes.csv``."""


def is_tiered(config: dict) -> bool:
    """Whether a ``helper.json`` is a tiered helper's (it names kinds, each at its price)."""
    from helper.gates.tiered_helper_gate import BACKEND, CLASSIFIER_BACKEND

    return config.get("backend") in (BACKEND, CLASSIFIER_BACKEND) or bool(config.get("kinds"))


def number(value) -> int | float:
    """A budget as JSON shows it best: a whole number as an int."""
    value = float(value)
    return int(value) if value.is_integer() else value


def budgets(helper, chosen: list[int] | None = None) -> list[int | float]:
    """The family's cost budgets, most help first: every budget the solved table holds (its cost budget down to 0 in
    its cost unit), or ``chosen`` (``--budgets``), each checked to be one of them."""
    resources = helper.table.resources
    grid = [number(Fraction(units, resources.scale)) for units in range(int(resources.budget), -1, -1)]
    if chosen is None:
        return grid
    picked = sorted({float(b) for b in chosen}, reverse=True)
    outside = [number(b) for b in picked if number(b) not in grid]
    if not picked or outside:
        raise ValueError(f"budgets={list(chosen)}: a tiered helper's budgets are the cost budgets its table holds, "
                         f"{grid[0]} down to 0 ({', '.join(map(str, grid[:8]))}{', ...' if len(grid) > 8 else ''}); "
                         f"{outside[0] if outside else 'none given'} is not one of them.")
    return [number(b) for b in picked]


def play(episodes, base, helps, gate, budget, seed: int) -> list[dict]:
    """One member on ``episodes`` (played in place): per episode its id, success, calls of any kind, cost and calls
    per kind (``calls_<kind>``), added up from the loop's own rows."""
    from agile.rollout import run_episodes

    records = run_episodes(episodes, base, helps=helps, gate=gate, budget=budget, rng_seed=int(seed))
    for episode in episodes:  # the next member replays these ids: its count must start empty
        gate.end_episode(episode.episode_id)
    rows = []
    for episode, steps in zip(episodes, records):
        called = [r.help_kind for r in steps if r.help_kind]
        rows.append({"episode_id": episode.episode_id, "success": float(episode.success()),
                     "interventions": len(called), "cost": float(sum(r.help_cost or 0.0 for r in steps)),
                     **{CALLS + h.name: called.count(h.name) for h in helps}})
    return rows


def spend_of(rows) -> dict:
    """A member's mean cost and calls per kind an episode, from its calibration rows (a pandas frame)."""
    return {"cost": float(rows["cost"].mean()),
            "calls": {c[len(CALLS):]: float(rows[c].mean()) for c in rows.columns if c.startswith(CALLS)}}
