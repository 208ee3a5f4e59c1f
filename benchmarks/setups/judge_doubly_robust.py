"""Whether a held-out reading re-weighted by the logged exploration chooses the helper's member better than the judge.

    python benchmarks/setups/judge_doubly_robust.py --noise 0.1 0.2 0.3 --seeds 8 --episodes 64

The judge (``tabular_rl.choice.judge``) reads each member in a model of the held-out fold, shrunk toward the
training folds' estimate; table members read high there (``benchmarks/published/judge-bias.txt``). The logged
interventions are random with a known probability, so a reading that needs no model for its mean exists: the
per-decision doubly robust estimate (Jiang & Li 2016), a model's value of the member plus, along each held-out
episode while its logged actions agree with the member's, the importance-weighted error of that model:

    V = V^(s_0) + sum_t w_t (r_t + V^(s_t+1) - Q^(s_t, a_t)),   w_t = prod_{k <= t} 1[a_k = member(s_k)] / mu(a_k)

``mu`` the logging probability (``explore`` to intervene while the logged budget lasts), ``Q^`` / ``V^`` the
member's success values under its cap in a model. Read here, on the rapids logged with an ideal verifier plus noise
as ``judge_bias.py`` logs them, four ways: the judge; ``dr judge``, the correction on the judge's own model;
``dr prior``, on the training folds' model only (independent of the held-out fold, so the mean is the truth's);
``wdr``, the weights normalised per step over the fold's episodes (Thomas & Brunskill 2016; an ended episode
keeps its last weight), each model.
Printed per noise and reading: the chosen member's true success per cap (mean over seeds), the best member's, the
share of the room kept, the lead over the threshold member the same reading chooses, and the reading's bias per
member; then, at ``--check-episodes`` logged rivers, each member's truth, judge and doubly robust reading.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from benchmarks.setups.judge_bias import synthetic_arguments, synthetic_family  # noqa: E402
from examples.rapids_optimum import (best_threshold, logged_rows, optimum, played_in_expectation,  # noqa: E402
                                     scored_rivers)
from tabular_rl.choice.judge import grid_of, grid_policy, judge_model, judged  # noqa: E402
from tabular_rl.choice.members import default_family, fit_member  # noqa: E402
from tabular_rl.choice.selection import REFERENCE_BINS  # noqa: E402
from tabular_rl.discretize import Discretizer  # noqa: E402
from tabular_rl.estimate import TabularModel, estimate  # noqa: E402
from tabular_rl.evaluate import policy_values, q_values  # noqa: E402

CAPS = (2, 3, 4, 5)
EXPLORE = 0.4
READINGS = ("judge", "dr judge", "dr prior", "wdr judge", "wdr prior")


def success_values(model: TabularModel, policy: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(V, Q): the member's success to go per (step, state, budget left), and per action too."""
    paid = dataclasses.replace(model, rewards=model.success)
    V = policy_values(paid, policy, hard_budget=True)
    T, S = model.horizon, model.n_states
    Q = np.zeros((T, S, budget + 1, 2))
    for t in range(T):
        q0, q1 = q_values(paid, t, V[t + 1] if t + 1 < T else np.zeros((S, budget + 1)), hard_budget=True)
        Q[t, ..., 0], Q[t, ..., 1] = q0, np.where(np.isfinite(q1), q1, 0.0)
    return V, Q


def doubly_robust(held: pl.DataFrame, model: TabularModel, grid: Discretizer, decide, budget: int,
                  weighted: bool) -> float:
    """The held-out episodes' per-decision doubly robust success of ``decide`` under a cap of ``budget`` (module
    docstring); ``weighted``: each step's weights normalised over the episodes."""
    policy = grid_policy(decide, grid, model.horizon, budget)
    V, Q = success_values(model, policy, budget)
    starts, weights, errors = [], [], []
    for _, episode in held.sort(["episode_id", "step"]).group_by("episode_id", maintain_order=True):
        steps = episode["step"].to_numpy()
        states = grid.transform(episode["prm_score"].to_numpy(), steps)
        acted, done = episode["intervened"].to_numpy().astype(int), episode["done"].to_numpy()
        success = episode["success"].to_numpy()
        w_row, e_row = np.zeros(model.horizon), np.zeros(model.horizon)
        left, w = budget, 1.0
        starts.append(V[steps[0], states[0], left])
        for i, t in enumerate(steps):
            s, a = states[i], acted[i]
            if int(policy[t, s, left] > 0.5) != a:
                w_row[t:] = 0.0  # the member would have acted otherwise: this episode says nothing more about it
                break
            w /= EXPLORE if a else 1.0 - EXPLORE
            after = 0.0 if done[i] or i + 1 == len(steps) else V[steps[i + 1], states[i + 1], left - a]
            w_row[t], e_row[t] = w, (success[i] if done[i] else 0.0) + after - Q[t, s, left, a]
            w_row[t + 1:] = w  # an ended episode keeps its weight in later steps' sums (its error there is 0)
            left -= a
        weights.append(w_row)
        errors.append(e_row)
    W, E = np.array(weights), np.array(errors)
    if weighted:
        total = W.sum(0)
        W = W / np.where(total > 0, total, 1.0) * len(starts)
    return float(np.mean(starts) + (W * E).sum() / len(starts))


def read(reading: str, members, held: pl.DataFrame, fit: pl.DataFrame) -> np.ndarray:
    """Per member and cap, the held-out fold's reading."""
    reference = Discretizer(REFERENCE_BINS).fit(fit["prm_score"], fit["step"]).edges_
    out = np.zeros((len(members), len(CAPS)))
    for i, member in enumerate(members):
        grid = grid_of([reference, member.edges])
        model = judge_model(held, fit, grid, objective="success")
        if reading == "judge":
            out[i] = [judged(model, grid, member.decide, c)[0] for c in CAPS]
            continue
        if reading.endswith("prior"):
            model = estimate(fit, grid, smoothing=1.0, backoff="auto", objective="success")
        out[i] = [doubly_robust(held, model, grid, member.decide, c, reading.startswith("w")) for c in CAPS]
    return out


def one_seed(seed: int, noise: float, episodes: int, scores: np.ndarray, slip: np.ndarray):
    rows = logged_rows(episodes, 1000 + seed, noise=noise, explore=EXPLORE)
    family = synthetic_family(rows, before_smooth=True)  # the family and judge this remedy was read against
    truth = np.array([[played_in_expectation(fit_member(s, rows, max(CAPS), objective="success").decide, scores, slip,
                                             c) for c in CAPS] for s in family])
    folds = rows["episode_id"].str.slice(1).cast(int).to_numpy() % 5
    horizon = int(rows["step"].max()) + 1
    totals = {r: np.zeros((len(family), len(CAPS))) for r in READINGS}
    for k in range(5):
        fit, held = rows.filter(pl.Series(folds != k)), rows.filter(pl.Series(folds == k))
        members = [fit_member(s, fit, max(CAPS), objective="success", horizon=horizon) for s in family]
        for reading in READINGS:
            totals[reading] += read(reading, members, held, fit) * held["episode_id"].n_unique()
    thresholds = [i for i, s in enumerate(family) if s.kind == "threshold"]
    out = {}
    for reading, total in totals.items():
        figure = total / rows["episode_id"].n_unique()
        chosen = figure.argmax(0)
        threshold = np.array(thresholds)[figure[thresholds].argmax(0)]
        cols = np.arange(len(CAPS))
        out[reading] = {"bias": figure - truth, "chosen": truth[chosen, cols], "best": truth.max(0),
                        "lead": truth[chosen, cols] - truth[threshold, cols]}
    return [s.name for s in family], out


def check(noise: float, episodes: int, scores: np.ndarray, slip: np.ndarray, cap: int = 4) -> None:
    """Each member at ``episodes`` logged rivers: its truth, the judge's and the doubly robust reading (training
    folds' model from as many other rivers): the variance the weights carry when data is not short."""
    fit, held = (logged_rows(episodes, seed, noise=noise, explore=EXPLORE) for seed in (7001, 7002))
    family = [s for s in default_family(6, "quantile", fit.height, 6, 5.0, max(CAPS)) if s.dynamics != "smooth"]
    reference = Discretizer(REFERENCE_BINS).fit(fit["prm_score"], fit["step"]).edges_
    print(f"\n  at {episodes} logged rivers, C = {cap}: member truth / judge / dr prior")
    for spec in family:
        member = fit_member(spec, fit, max(CAPS), objective="success")
        grid = grid_of([reference, member.edges])
        prior = estimate(fit, grid, smoothing=1.0, backoff="auto", objective="success")
        truth = played_in_expectation(member.decide, scores, slip, cap)
        print(f"    {spec.name:24s} {truth:.3f} / {judged(judge_model(held, fit, grid), grid, member.decide, cap)[0]:.3f}"
              f" / {doubly_robust(held, prior, grid, member.decide, cap, weighted=False):.3f}")


def main() -> None:
    parser = synthetic_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--check-episodes", type=int, default=3000, help="logged rivers of the check; 0: none")
    args = parser.parse_args()
    room = {c: (optimum(c)[0], max(best_threshold(c).values())) for c in CAPS}
    print(f"caps {CAPS}; exact optimum {[round(room[c][0], 3) for c in CAPS]}, the ideal verifier's best threshold "
          f"{[round(room[c][1], 3) for c in CAPS]}; logged interventions at random, p = {EXPLORE}")
    for noise in args.noise:
        scores, slip = scored_rivers(args.rivers, 99, noise=noise)
        results = [one_seed(seed, noise, args.episodes, scores, slip) for seed in range(args.seeds)]
        names = results[0][0]
        print(f"\nnoise {noise}, {args.seeds} seeds of {args.episodes} rivers, C = {CAPS}:")
        for reading in READINGS:
            chosen = np.mean([r[1][reading]["chosen"] for r in results], axis=0)
            best = np.mean([r[1][reading]["best"] for r in results], axis=0)
            lead = np.array([r[1][reading]["lead"] for r in results])
            bias = np.mean([r[1][reading]["bias"] for r in results], axis=0).mean(1)
            kept = [(chosen[j] - room[c][1]) / (room[c][0] - room[c][1]) for j, c in enumerate(CAPS)]
            tables = [i for i, n in enumerate(names) if not n.startswith("threshold")]
            print(f"  {reading:9s}: chosen " + " / ".join(f"{v:.3f}" for v in chosen) + " (best "
                  + " / ".join(f"{v:.3f}" for v in best) + "); kept " + " / ".join(f"{v:.2f}" for v in kept)
                  + "; lead over its threshold " + " / ".join(f"{v:+.3f}" for v in lead.mean(0)))
            print("             bias " + ", ".join(f"{names[i]} {bias[i]:+.3f}" for i in tables)
                  + f", thresholds {np.delete(bias, tables).mean():+.3f}")
        if args.check_episodes:
            check(noise, args.check_episodes, scores, slip)


if __name__ == "__main__":
    main()
