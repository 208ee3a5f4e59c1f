"""How few interventions any gate can spend for a target success on plain-cue, against the per-step threshold.

    python benchmarks/setups/calibration_frontier.py --targets 0.91 0.9 0.74 0.7

Exact, on the true dynamics of ``examples.plain_cue`` (no episode played). For each target success it prints the
interventions per episode of

- ``frontier``: the least any gate can spend, in expectation, to reach the target: the priced optimum over every
  price (``tabular_rl.solvers.solve_priced`` on the true model, no budget) with the mixture of the two neighbouring
  priced policies that meets the target exactly (a randomised gate; the lower envelope of success against spend);
- ``priced``: the cheapest deterministic priced policy whose success reaches the target;
- ``budget``: the cheapest budgeted optimum (C = 0..5, ``examples.plain_cue_optimum.optimum``) that reaches it;
- ``threshold``: the cheapest per-step threshold on the perfect verifier (help where the agent's true chance at the
  crossing is at most tau: never, at dangerous crossings, at risky ones, always; a crossing after a slip is never
  reached) that reaches it;

and the largest saving against the threshold that each could give with a perfectly known success (n -> infinity).
A finite calibration can only certify a member whose success clears the target by a margin, so these savings bound
what `helpgate calibrate` can show at that target from above.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from examples.plain_cue import HORIZON, RISK_ODDS, SLIP  # noqa: E402
from examples.plain_cue_optimum import optimum, true_model  # noqa: E402
from tabular_rl.solvers import solve_priced  # noqa: E402


def priced_points(prices) -> list[tuple[float, float]]:
    """(expected interventions, success) of each distinct priced policy, by spend."""
    model = true_model()
    points = {}
    for price in prices:
        solution = solve_priced(model, float(price))
        points[round(solution.expected_interventions, 12)] = round(solution.expected_success, 12)
    return sorted(points.items())


def threshold_points() -> list[tuple[float, float]]:
    """(interventions, success) of helping at every crossing whose slip is at least each level (no budget)."""
    out = []
    for level in sorted(set(SLIP.values()) | {1.1}, reverse=True):  # 1.1: never help
        helped = {r for r, p in SLIP.items() if p >= level}
        step_success = sum(q * (1.0 if r in helped else 1.0 - SLIP[r]) for r, q in RISK_ODDS.items())
        helps = sum(q for r, q in RISK_ODDS.items() if r in helped)
        # A slip ends the episode: crossing t is reached (and helped) only after t safe crossings.
        out.append((helps * sum(step_success ** t for t in range(HORIZON)), step_success ** HORIZON))
    return sorted(out)


def cheapest(points, target: float) -> float:
    reaching = [spend for spend, success in points if success >= target - 1e-12]
    return min(reaching) if reaching else float("nan")


def envelope(points, target: float) -> float:
    """The least expected spend reaching ``target`` by mixing two neighbouring points of the (concave) frontier."""
    for (s1, v1), (s2, v2) in zip(points, points[1:]):
        if v1 <= target <= v2:
            return s1 + (target - v1) / (v2 - v1) * (s2 - s1) if v2 > v1 else s1
    return points[0][0] if target <= points[0][1] else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=float, nargs="+", default=[0.91, 0.9, 0.74, 0.7])
    parser.add_argument("--prices", type=int, default=3001, help="prices in [0, 1.5] (1.5 stops every intervention)")
    args = parser.parse_args()
    priced = priced_points(np.linspace(0.0, 1.5, args.prices))
    budget = [(optimum(c)[1], optimum(c)[0]) for c in range(HORIZON + 1)]
    threshold = threshold_points()
    print("priced policies (interventions, success):", ", ".join(f"({s:.3f}, {v:.3f})" for s, v in priced))
    print("budget C = 0..5 (interventions, success):", ", ".join(f"({s:.3f}, {v:.3f})" for s, v in budget))
    print("threshold levels (interventions, success):", ", ".join(f"({s:.3f}, {v:.3f})" for s, v in threshold))
    for target in args.targets:
        t = cheapest(threshold, target)
        row = {"frontier": envelope(priced, target), "priced": cheapest(priced, target), "budget": cheapest(budget, target)}
        print(f"target {target:.2f}: threshold {t:.3f}  " + "  ".join(
            f"{k} {v:.3f} ({100 * (1 - v / t):+.1f}%)" for k, v in row.items()))


if __name__ == "__main__":
    main()
