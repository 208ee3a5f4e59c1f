"""Where the smooth member loses to the verifier's ceiling on the rapids, and whether the risk curve's shape can win
it back.

    python benchmarks/setups/rapids_risk_estimate.py benchmarks/data/rapids-sm-members/seed*

The smooth member (``tabular_rl.smooth``) reads three things off the training rows: the score bins, the risk of each
(step, bin) from its curve, and the share of rivers in each bin at the next step. Each is swapped here for the truth
on the kept fresh rivers (their slip probabilities: ``rapids_members.river_risk``), the model solved exactly and
played on the same rivers in expectation over the slips:

- ``ceiling``: ``rapids_members.ceiling`` (bins cut on the rivers' scores, risk and next states the rivers');
- ``ceiling, the member's bins``: the same with the member's own edges (cut on the training rows' out-of-fold scores);
- ``true risk, training next states`` / ``estimated risk, rivers' next states``: one of the two read off the rivers,
  and ``estimated risk, training next states``: neither (the member's model but for its help's pooled failure rate);
- ``the member``: the smooth member as distill fits it (both read off the training rows).

Then the curve's shape: the L2 strength on its per-step terms (``penalty``: the inverse, as scikit-learn's ``C``; the
member's is ``tabular_rl.smooth.PENALTY``), each solved as ``estimated risk, training next states`` is (both read off
the training rows), and the bins the member is read at (the member refitted with that many). A
reading, not a method: the rivers' truth is an oracle's.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from benchmarks.setups.rapids_members import ceiling, load, river_risk, solve_per_step  # noqa: E402
from examples.rapids_optimum import played_in_expectation  # noqa: E402
from tabular_rl.choice.members import MemberSpec, fit_member  # noqa: E402
from tabular_rl.smooth import PENALTY, fit_risk_curve, state_scores  # noqa: E402

PENALTIES = (0.03, 0.3, 1.0, 10.0)
BINS = (6, 18, 24, 36)


def smooth_spec(kept: dict) -> MemberSpec:
    return next(MemberSpec.from_dict(d) for d in kept["family"] if d["dynamics"] == "smooth")


def readings(kept: dict, budgets: list[int]) -> dict[str, list[float]]:
    """Per reading (module docstring), the true success at each cap."""
    labels = kept["labels"]
    rivers = kept["rivers"].sort(["river", "step"])
    horizon = int(rivers["step"].max()) + 1
    scores = rivers["prm_score"].to_numpy().reshape(-1, horizon)
    slip = rivers["slip"].to_numpy().reshape(-1, horizon)
    spec = smooth_spec(kept)
    member = fit_member(spec, labels, max(budgets), objective="success")
    d = member.discretizer
    steps = np.arange(horizon)
    river_state = d.transform(scores.ravel(), np.tile(steps, len(scores))).reshape(scores.shape)
    true_risk, river_occupancy = river_risk(river_state, slip, d.n_states)
    step = labels["step"].to_numpy()
    row_state = d.transform(labels["prm_score"].to_numpy(), step)
    training_occupancy = np.array([np.bincount(row_state[step == t], minlength=d.n_states) / max((step == t).sum(), 1)
                                   for t in steps])
    estimated_risk = fit_risk_curve(labels, horizon=horizon).rates(state_scores(labels, d))[:, :, 0]

    def played(risk, occupancy, c):
        solution = solve_per_step(risk, occupancy, c)
        return played_in_expectation(lambda t, score, left: solution.intervene_prob(
            t, d.transform(np.atleast_1d(score), np.full(np.size(score), t)), left) > 0.5, scores, slip, c)

    out = {"ceiling": [ceiling(scores, slip, c) for c in budgets],
           "ceiling, the member's bins": [played(true_risk, river_occupancy, c) for c in budgets],
           "true risk, training next states": [played(true_risk, training_occupancy, c) for c in budgets],
           "estimated risk, rivers' next states": [played(estimated_risk, river_occupancy, c) for c in budgets],
           "estimated risk, training next states": [played(estimated_risk, training_occupancy, c) for c in budgets],
           "the member": [played_in_expectation(member.decide, scores, slip, c) for c in budgets]}
    for penalty in PENALTIES:
        curve = fit_risk_curve(labels, horizon=horizon, penalty=penalty).rates(state_scores(labels, d))[:, :, 0]
        out[f"penalty {penalty:g} (the member's {PENALTY:g})"] = [
            played(curve, training_occupancy, c) for c in budgets]
    for bins in BINS:
        binned = fit_member(replace(spec, bins=bins), labels, max(budgets), objective="success")
        out[f"{bins} bins (the member's {spec.bins})"] = [
            played_in_expectation(binned.decide, scores, slip, c) for c in budgets]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kept", nargs="+", type=Path, help="kept folders of benchmarks/setups/rapids_members.py --save")
    args = parser.parse_args()
    pooled: dict[str, list[list[float]]] = {}
    budgets = None
    for folder in args.kept:
        kept = load(folder)
        budgets = [int(b) for b in kept["selection"]["budgets"]]
        for name, values in readings(kept, budgets).items():
            pooled.setdefault(name, []).append(values)
    print(f"the smooth member in truth, mean over {len(args.kept)} kept run(s) on their fresh rivers, at C = "
          + " / ".join(str(c) for c in budgets))
    for name, values in pooled.items():
        print(f"  {name:<40} " + " / ".join(f"{v:.3f}" for v in np.mean(values, axis=0)))


if __name__ == "__main__":
    main()
