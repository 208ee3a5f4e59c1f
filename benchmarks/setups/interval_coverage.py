"""Do the report's 95% intervals cover when there are few clusters (seeds x groups)?

    OMP_NUM_THREADS=1 python benchmarks/setups/interval_coverage.py --reps 400 --resamples 1000

A paired difference (helper minus baseline) per episode is simulated as
``mu + seed effect + group effect + seed-by-group effect + episode noise`` (normal; group effects strong,
as the product groups of ProductQA), for 2 to 6 clusters: one seed and 2-6 groups (nested), or 2-3 seeds
crossed with 2-3 fixed groups, with several episodes per cell. Each repetition draws the effects afresh
and asks whether the interval holds the true ``mu``:

- ``percentile``: the report's interval before this change, the percentile interval of the bootstrap that
  ``helper.evaluation.metrics.seed_group_weights`` draws (crossed or nested);
- ``t``: ``helper.evaluation.metrics.cluster_t_interval``, the report's interval now: a t interval over the
  clusters (``metrics.cluster_variance``: the cluster means' variance with K - 1 degrees of freedom where
  groups are nested, a two-way layout of seeds x groups with Satterthwaite's degrees where crossed).

Prints, per design, coverage and mean width of both (a binomial 95% band of the coverage beside it).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from helper.evaluation import metrics as M

DESIGNS = [(1, 2), (1, 3), (1, 4), (1, 6), (2, 2), (2, 3), (3, 2)]
"""(seeds, groups): 2 to 6 clusters."""


def simulate(seeds: int, groups: int, episodes: int, rng: np.random.Generator, sd: dict) -> tuple[list, list, np.ndarray]:
    seed_effect = rng.normal(0, sd["seed"], seeds)
    group_effect = rng.normal(0, sd["group"], groups)
    labels_s, labels_g, values = [], [], []
    for s in range(seeds):
        for g in range(groups):
            cell = rng.normal(0, sd["cell"])
            labels_s += [s] * episodes
            labels_g += [f"g{g}"] * episodes
            values.append(seed_effect[s] + group_effect[g] + cell + rng.normal(0, sd["episode"], episodes))
    return labels_s, labels_g, np.concatenate(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400, help="repetitions per design")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval")
    parser.add_argument("--episodes", type=int, default=12, help="episodes per (seed, group) cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sd = {"seed": 0.05, "group": 0.15, "cell": 0.05, "episode": 0.5}
    print(f"effects sd {sd}; {args.episodes} episodes per cell; {args.reps} repetitions, "
          f"{args.resamples} resamples each; level 95%")
    print("| seeds x groups | design | percentile coverage [band] | width | t coverage [band] | width |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    for seeds, groups in DESIGNS:
        hits = {"percentile": [], "t": []}
        widths = {"percentile": [], "t": []}
        for rep in range(args.reps):
            labels_s, labels_g, values = simulate(seeds, groups, args.episodes, rng, sd)
            levels = [labels_s, labels_g]
            draws = M.weighted_means(values, M.seed_group_weights(levels, args.resamples, rep))[:, 0]
            intervals = {"percentile": M.percentile_interval(draws),
                         "t": M.cluster_t_interval(values, levels)}
            for name, (low, high) in intervals.items():
                hits[name].append(low <= 0.0 <= high)  # the true mean difference is 0
                widths[name].append(high - low)
        design = "crossed" if M.shares_groups(labels_s, labels_g) else "nested"
        cells = []
        for name in ("percentile", "t"):
            p = float(np.mean(hits[name]))
            band = 1.96 * np.sqrt(p * (1 - p) / args.reps)
            cells += [f"{p:.3f} [{p - band:.3f}, {p + band:.3f}]", f"{np.mean(widths[name]):.3f}"]
        print(f"| {seeds} x {groups} | {design} | " + " | ".join(cells) + " |", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)  # the table alone on stdout: it recomputes


if __name__ == "__main__":
    main()
