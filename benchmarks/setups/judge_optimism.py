"""How the judge's lean toward table members shrinks when its readings are corrected by a parametric bootstrap.

    python benchmarks/setups/judge_optimism.py --seeds 8 --bootstraps 4 --plays 300 --noise 0.1 0.2

The judge (``tabular_rl.choice.judge``) reads table members high and thresholds low on the synthetic rapids
(``benchmarks/published/judge-bias.txt``), so where a threshold is nearly optimal (C = 5) the folds may choose a
table that is worse in truth. Efron's optimism bootstrap, made for a policy: from the training rows R (64 rivers)
a model M (``tabular_rl.estimate`` on 6 equal-count bins per step; a river of M draws each state from M, its score
from R's scores in that (step, state) cell, a slip as M's "episode over"); B times, simulate 64 logged rivers from
M (random interventions, p = 0.4), read every member by the same cross-fitted judge (J_b), fit every member on them
and play it on ``--plays`` rivers of M (T_b). A member's optimism is the mean of J_b - T_b; its corrected reading
J - optimism. Printed per noise: the chosen member's true success per cap (3,000 fresh rivers, in expectation), the
best member's, the lead over the threshold member the same readings choose (mean and worst seed), each reading's
bias per member, and the optimism the bootstrap measured. A lead for the member choice, not adopted: the product's
judge is unchanged.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from benchmarks.setups.judge_bias import synthetic_family  # noqa: E402
from examples.rapids_optimum import logged_rows, played_in_expectation, scored_rivers  # noqa: E402
from tabular_rl.choice.members import fit_member  # noqa: E402
from tabular_rl.choice.selection import cross_fitted  # noqa: E402
from tabular_rl.discretize import Discretizer  # noqa: E402
from tabular_rl.estimate import estimate  # noqa: E402

CAPS = (2, 3, 4, 5)
EXPLORE = 0.4


class Sim:
    """Rivers of the model M of the training rows (module docstring): logged with random interventions, or a
    gate's success under a cap."""

    def __init__(self, rows):
        self.T = int(rows["step"].max()) + 1
        self.grid = Discretizer(6).fit(rows["prm_score"], rows["step"])
        self.M = estimate(rows, self.grid, objective="success")
        st = self.grid.transform(rows["prm_score"].to_numpy(), rows["step"].to_numpy())
        steps = rows["step"].to_numpy(); sc = rows["prm_score"].to_numpy()
        self.cells = {}
        for t, s, x in zip(steps, st, sc):
            self.cells.setdefault((t, s), []).append(x)
        allsc = {}
        for t, x in zip(steps, sc):
            allsc.setdefault(t, []).append(x)
        self.fallback = allsc
        self.S = self.M.n_states

    def score(self, rng, t, s):
        pool = self.cells.get((t, s)) or self.fallback[t]
        return pool[rng.integers(len(pool))]

    def rivers(self, n, rng, decide=None, budget=0):
        """logged rows (decide None) or success of decide under budget."""
        rows, wins = [], 0
        for e in range(n):
            s = rng.choice(self.S, p=self.M.start / self.M.start.sum())
            left, kept, made = budget, [], True
            for t in range(self.T):
                x = self.score(rng, t, s)
                if decide is None:
                    a = int(rng.random() < EXPLORE)
                else:
                    a = int(left > 0 and bool(np.asarray(decide(np.array([t]), np.array([x]), np.array([left])))[0]))
                    left -= a
                p = self.M.transitions[t, s, a]
                nxt = rng.choice(self.S + 1, p=p / p.sum())
                end = nxt == self.S and t < self.T - 1
                kept.append({"episode_id": f"e{e}", "step": t, "intervened": bool(a), "reward": float(not end),
                             "done": bool(end or t == self.T - 1), "prm_score": float(x)})
                if end:
                    made = False
                    break
                s = nxt if nxt < self.S else s
            wins += made
            rows += [r | {"success": float(made)} for r in kept]
        return pl.DataFrame(rows) if decide is None else wins / n


def judged_family(rows, family):
    folds = rows["episode_id"].str.slice(1).cast(int).to_numpy() % 5
    return cross_fitted(rows, folds, family, list(CAPS), objective="success", judge_prior="steps").success


def one_seed(seed, noise, episodes, scores, slip, B, plays):
    rows = logged_rows(episodes, 1000 + seed, noise=noise, explore=EXPLORE)
    family = synthetic_family(rows, before_smooth=True)  # the family and judge this lead was read against
    truth = np.array([[played_in_expectation(fit_member(s, rows, max(CAPS), objective="success").decide, scores, slip, c)
                       for c in CAPS] for s in family])
    J = judged_family(rows, family)
    sim, rng = Sim(rows), np.random.default_rng(seed)
    opt = np.zeros_like(J)
    for b in range(B):
        Rb = sim.rivers(episodes, rng)
        Jb = judged_family(Rb, family)
        Tb = np.array([[sim.rivers(plays, rng, fit_member(s, Rb, max(CAPS), objective="success").decide, c) for c in CAPS]
                       for s in family])
        opt += (Jb - Tb) / B
    thr = [i for i, s in enumerate(family) if s.kind == "threshold"]
    out = {}
    for name, F in (("judge", J), ("corrected", J - opt)):
        ch = F.argmax(0); bt = np.array(thr)[F[thr].argmax(0)]
        cols = np.arange(len(CAPS))
        out[name] = dict(chosen=truth[ch, cols], lead=truth[ch, cols] - truth[bt, cols], best=truth.max(0),
                         bias=(F - truth).mean(1))
    return [s.name for s in family], out, opt.mean(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--bootstraps", type=int, default=4, help="simulated training sets a seed (B)")
    parser.add_argument("--plays", type=int, default=300, help="rivers of the model each member's truth is read on")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.2])
    args = parser.parse_args()
    seeds, B, plays, noises = args.seeds, args.bootstraps, args.plays, args.noise
    for noise in noises:
        t0 = time.time()
        scores, slip = scored_rivers(3000, 99, noise=noise)
        res = [one_seed(s, noise, 64, scores, slip, B, plays) for s in range(seeds)]
        names = res[0][0]
        print(f"\nnoise {noise}, {seeds} seeds, B={B}, plays={plays}", flush=True)
        print(f"noise {noise}: {time.time() - t0:.0f} s", file=sys.stderr)
        for k in ("judge", "corrected"):
            ch = np.mean([r[1][k]["chosen"] for r in res], 0); lead = np.array([r[1][k]["lead"] for r in res])
            best = np.mean([r[1][k]["best"] for r in res], 0)
            bias = np.mean([r[1][k]["bias"] for r in res], 0)
            tabs = [i for i, n in enumerate(names) if not n.startswith("threshold")]
            print(f"  {k:9s} chosen {np.round(ch,3)} best {np.round(best,3)} lead {np.round(lead.mean(0),3)} worst {np.round(lead.min(0),3)}")
            print("     bias " + ", ".join(f"{names[i]} {bias[i]:+.3f}" for i in tabs) + f", thr {np.delete(bias, tabs).mean():+.3f}")
        o = np.mean([r[2] for r in res], 0)
        print("  optimism " + ", ".join(f"{names[i]} {o[i]:+.3f}" for i in tabs) + f", thr {np.delete(o, tabs).mean():+.3f}", flush=True)


if __name__ == "__main__":
    main()
