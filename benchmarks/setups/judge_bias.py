"""How the training folds read the helper's members when the truth is known: the rapids' dynamics logged with an
ideal verifier plus noise, every member's cross-fitted figure against its true success on fresh rivers.

    python benchmarks/setups/judge_bias.py --noise 0.1 0.2 0.3 --seeds 8 --episodes 64

No PRM: the rows are ``examples.rapids_optimum.logged_rows`` (random interventions, a slip ends the river), the
verifier's score the risk's ideal score plus normal noise of each ``--noise``. Per seed the family a 6-bin solve
gives (``tabular_rl.choice.members.default_family``: the table, steps pooled, stationary dynamics, pessimism, thresholds)
is cross-fitted over 5 folds of episodes (``tabular_rl.choice.selection.cross_fitted``, the judge distill uses), and each
member, fitted on every row, is played on ``--rivers`` fresh rivers in expectation over the slips. Printed per noise:
the judge's bias per member (cross-fitted minus true, mean over seeds and caps), the chosen and the best member's true
success, what the helper keeps of the room between the ideal verifier's best threshold and the exact optimum, and
the helper against the threshold member the same folds choose (the full-strength ``prm_threshold``), both in truth. ``--prior-rows`` repeats the reading with the judge's prior weight
(``tabular_rl.choice.judge.PRIOR_ROWS``: rows' worth of the training folds' estimate in each held-out cell) at other values,
``--judge-prior steps mixed smooth`` with that estimate the training folds' per-step model, half of it and half their
smooth model (``tabular_rl.smooth``; the default), or the smooth model alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

import tabular_rl.choice.judge as judge  # noqa: E402
from examples.rapids_optimum import (best_threshold, logged_rows, optimum, played_in_expectation,  # noqa: E402
                                     scored_rivers)
from tabular_rl.choice.members import default_family, fit_member  # noqa: E402
from tabular_rl.choice.selection import JUDGE_PRIORS, cross_fitted  # noqa: E402

CAPS = (2, 3, 4, 5)


def synthetic_family(rows, before_smooth: bool = False) -> list:
    """The family a 6-bin solve gives on the synthetic rapids; ``before_smooth``: without the smooth member, as the
    readings of ``judge_optimism.py`` and ``judge_doubly_robust.py`` (and this script's ``judge-bias`` table) were
    taken, with the judge's thin cells filled by the per-step model alone."""
    decisions = float(rows.group_by("episode_id").len()["len"].mean())
    family = default_family(6, "quantile", rows.height, 6, decisions, max(CAPS))
    return [s for s in family if s.dynamics != "smooth"] if before_smooth else family


RULES = {"best": "the best on the folds", "chosen": "the best, or the smooth member within one standard error"}
"""How the chosen member is read off the cross-fitted table: ``CrossFitted.best`` or ``CrossFitted.chosen``."""


def one_seed(seed: int, noise: float, episodes: int, scores: np.ndarray, slip: np.ndarray,
             readings: list[tuple[float, str]], before_smooth: bool = False, rules: tuple[str, ...] = ("best",)):
    rows = logged_rows(episodes, 1000 + seed, noise=noise)
    family = synthetic_family(rows, before_smooth)
    fitted = [fit_member(s, rows, max(CAPS), objective="success") for s in family]
    truth = np.array([[played_in_expectation(m.decide, scores, slip, c) for c in CAPS] for m in fitted])
    folds = rows["episode_id"].str.slice(1).cast(int).to_numpy() % 5
    out = {}
    for weight, prior in readings:
        kept, judge.PRIOR_ROWS = judge.PRIOR_ROWS, weight
        try:
            table = cross_fitted(rows, folds, family, list(CAPS), objective="success", judge_prior=prior)
        finally:
            judge.PRIOR_ROWS = kept
        threshold = table.best(table.kind_indices("threshold"))
        for rule in rules:
            best = getattr(table, rule)()
            out[(weight, prior, rule)] = {
                "bias": table.success - truth, "chosen": np.array([truth[best[c], j] for j, c in enumerate(CAPS)]),
                "best": truth.max(0), "threshold": np.array([truth[threshold[c], j] for j, c in enumerate(CAPS)])}
    return [s.name for s in family], out


def synthetic_arguments(description: str) -> argparse.ArgumentParser:
    """The synthetic rapids' flags, shared by the scripts that read the member choice against its truth."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=64, help="training rivers a seed")
    parser.add_argument("--rivers", type=int, default=3000, help="fresh rivers the truth is read on")
    return parser


def main() -> None:
    parser = synthetic_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--prior-rows", type=float, nargs="+", default=[judge.PRIOR_ROWS])
    parser.add_argument("--before-smooth", action="store_true",
                        help="the family and judge before the smooth model (no smooth member, the per-step prior)")
    parser.add_argument("--judge-prior", nargs="+", default=["mixed"], choices=list(JUDGE_PRIORS),
                        help="what fills the judge's thin cells: the training folds' per-step model, half of it and "
                             "half their smooth model, or the smooth model alone")
    parser.add_argument("--choice", nargs="+", default=["chosen"], choices=list(RULES),
                        help="how the member is chosen: the best on the folds, or (distill's rule) the smooth member "
                             "where it is within one standard error of the best and not below the best threshold")
    args = parser.parse_args()
    if args.before_smooth and args.judge_prior != ["mixed"]:
        parser.error("--before-smooth reads with the per-step judge alone; leave --judge-prior out")
    priors = ["steps"] if args.before_smooth else args.judge_prior
    readings = [(weight, prior) for prior in priors for weight in args.prior_rows]
    rules = tuple(args.choice)
    room = {c: (optimum(c)[0], max(best_threshold(c).values())) for c in CAPS}
    print(f"caps {CAPS}; exact optimum {[round(room[c][0], 3) for c in CAPS]}, the ideal verifier's best threshold "
          f"{[round(room[c][1], 3) for c in CAPS]}")
    for noise in args.noise:
        scores, slip = scored_rivers(args.rivers, 99, noise=noise)
        results = [one_seed(seed, noise, args.episodes, scores, slip, readings, args.before_smooth, rules)
                   for seed in range(args.seeds)]
        names = results[0][0]
        for (weight, prior), rule in ((reading, rule) for reading in readings for rule in rules):
            read = [r[1][(weight, prior, rule)] for r in results]
            bias = np.mean([r["bias"] for r in read], axis=0).mean(1)
            chosen = np.mean([r["chosen"] for r in read], axis=0)
            best = np.mean([r["best"] for r in read], axis=0)
            lead = np.array([r["chosen"] - r["threshold"] for r in read])
            captured = [(chosen[j] - room[c][1]) / (room[c][0] - room[c][1]) for j, c in enumerate(CAPS)]
            tables = [i for i, n in enumerate(names) if not n.startswith("threshold")]
            thresholds = [i for i, n in enumerate(names) if n.startswith("threshold")]
            print(f"\nnoise {noise}, {args.seeds} seeds of {args.episodes} rivers, judge prior {weight:g} rows of the "
                  f"{prior} model" + ("" if rules == ("best",) else f", chosen: {RULES[rule]}") + ":")
            print("  bias (cross-fitted - true): " + ", ".join(f"{names[i]} {bias[i]:+.3f}" for i in tables)
                  + f", thresholds {bias[thresholds].mean():+.3f}")
            print("  chosen member's true success " + " / ".join(f"{v:.3f}" for v in chosen)
                  + "; best member's " + " / ".join(f"{v:.3f}" for v in best)
                  + "; captured " + " / ".join(f"{v:.2f}" for v in captured) + f" at C = {CAPS}")
            print("  helper - the threshold member its folds choose (both in truth): " + " / ".join(
                f"{m:+.3f} (worst seed {w:+.3f})" for m, w in zip(lead.mean(0), lead.min(0))))


if __name__ == "__main__":
    main()
