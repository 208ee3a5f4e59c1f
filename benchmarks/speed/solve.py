"""Benchmark: discretize + estimate + solve + label on logged decision points from a known MDP.

    python benchmarks/speed/solve.py                      # 10M rows, 20 bins, 50 steps, C = 1..10
    python benchmarks/speed/solve.py --rows 1000000       # smaller

1. Simulates ``--rows`` decision points from a known 50-step MDP (collection-style random
   interventions) and writes them to a temporary Parquet file.
2. Fast path (``tabular_rl``) on all rows, in a fresh subprocess so that its peak memory
   (``ru_maxrss``) is its own: read, fit the quantile discretizer, estimate, solve the exact
   hard-budget problem for every C, label every row for every C.
3. The same fast path and a straightforward pandas group-by + Python-loop implementation on the
   same subsample (``--naive-rows``, whole episodes), timed in this process; prints the ratio and
   checks that both produce the same policies and labels.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tabular_rl import Discretizer, TabularModel, estimate, label, simulate, solve_exact

SMOOTHING, BACKOFF = 1.0, 5.0
TIE_TOL = 1e-12


def known_mdp(steps: int, states: int, seed: int) -> TabularModel:
    """Random dynamics; intervening shifts mass to higher states; 1% chance of ending per step."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(states, 0.5), size=(steps, states, 2))
    p[:, :, 1] = 0.5 * p[:, :, 1] + 0.5 * rng.dirichlet(np.linspace(0.2, 3.0, states), size=(steps, states))
    trans = np.concatenate([0.99 * p, np.full((steps, states, 2, 1), 0.01)], axis=-1)
    quality = np.arange(states) / states
    rewards = np.stack(
        [0.02 * quality + 0.01 * rng.random((steps, states)), 0.02 * quality + 0.01 * rng.random((steps, states))],
        axis=-1,
    )
    return TabularModel(transitions=trans, rewards=rewards, start=np.full(states, 1.0 / states))


def make_data(rows: int, steps: int, states: int, budget: int, seed: int) -> pl.DataFrame:
    model = known_mdp(steps, states, seed)
    pilot = simulate(model, 2000, budget=budget, behaviour=0.3, seed=seed)
    n_ep = math.ceil(1.05 * rows / (pilot.height / 2000))
    df = simulate(model, n_ep, budget=budget, behaviour=0.3, seed=seed + 1, reward_noise=0.01).drop("state")
    # Keep whole episodes until the target is reached.
    ends = np.flatnonzero(df["done"].to_numpy())
    df = df.head(int(ends[np.searchsorted(ends, rows - 1)]) + 1)
    # A few rows the PRM could not score exercise the unknown state.
    nan = np.random.default_rng(seed + 2).random(df.height) < 0.001
    return df.with_columns(pl.when(pl.Series(nan)).then(None).otherwise(pl.col("prm_score")).alias("prm_score"))


# -- fast path -----------------------------------------------------------------------------------
def fast_pipeline(df: pl.DataFrame, bins: int, budgets: list[int]) -> tuple[dict, list, pl.DataFrame]:
    times = {}
    t0 = time.perf_counter()
    disc = Discretizer(bins, "quantile").fit(df["prm_score"], df["step"])
    t1 = time.perf_counter()
    model = estimate(df, disc, smoothing=SMOOTHING, backoff=BACKOFF)
    t2 = time.perf_counter()
    sols = [solve_exact(model, c) for c in budgets]
    t3 = time.perf_counter()
    out = label(df, sols)
    t4 = time.perf_counter()
    times |= {"discretize": t1 - t0, "estimate": t2 - t1, "solve": t3 - t2, "label": t4 - t3, "total": t4 - t0}
    return times, sols, out


def worker(path: str, bins: int, budgets: list[int]) -> None:
    t0 = time.perf_counter()
    df = pl.read_parquet(path)
    read = time.perf_counter() - t0
    times, sols, _ = fast_pipeline(df, bins, budgets)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(
        json.dumps(
            {
                "rows": df.height,
                "read": read,
                **times,
                "peak_rss_mib": peak_mib,
                "expected_interventions": [s.expected_interventions for s in sols],
            }
        )
    )


# -- naive baseline: pandas group-by + Python loops ----------------------------------------------
def naive_pipeline(pdf: pd.DataFrame, bins: int, budgets: list[int]) -> tuple[list, np.ndarray]:
    pdf = pdf.sort_values(["episode_id", "step"]).reset_index(drop=True)
    edges = pdf["prm_score"].quantile(np.arange(1, bins) / bins).to_numpy()
    state = pd.cut(pdf["prm_score"], [-np.inf, *edges, np.inf], right=False, labels=False)
    pdf["state"] = state.fillna(bins).astype(int)
    S, T = bins + 1, int(pdf["step"].max()) + 1
    pdf["a"] = pdf["intervened"].astype(int)
    g = pdf.groupby("episode_id")
    nxt_state, nxt_step = g["state"].shift(-1), g["step"].shift(-1)
    linked = (nxt_step == pdf["step"] + 1) & ~pdf["done"]
    pdf["next"] = np.where(linked, nxt_state, S).astype(int)

    N = np.zeros((T, S, 2, S + 1))
    for (t, s, a, s2), c in pdf.groupby(["step", "state", "a", "next"]).size().items():
        N[t, s, a, s2] = c
    # Rewards split by whether the row ended its episode (the estimator's end share x ending rows' mean + the rest).
    pdf["ends"] = pdf["next"] == S
    rsum = {kind: np.zeros((T, S, 2)) for kind in (True, False)}
    for (t, s, a, kind), r in pdf.groupby(["step", "state", "a", "ends"])["reward"].sum().items():
        rsum[kind][t, s, a] = r
    gmean = {}
    for kind in (True, False):
        part = pdf[pdf["ends"] == kind]
        overall = part["reward"].mean() if len(part) else 0.0
        by_action = part.groupby("a")["reward"].mean()
        gmean[kind] = [by_action.get(a, overall) for a in (0, 1)]

    P, R = np.zeros((T, S, 2, S + 1)), np.zeros((T, S, 2))
    # Ending backs off to the step's end rate times the (state, action)'s relative risk, moving to
    # the (state, action) moves pooled over steps.
    step_rows = [N[t].sum() for t in range(T)]
    step_ends = [N[t, :, :, S].sum() for t in range(T)]
    overall_end = sum(step_ends) / sum(step_rows)
    hazard = [(step_ends[t] + SMOOTHING * overall_end) / (step_rows[t] + SMOOTHING) for t in range(T)]
    for s in range(S):
        for a in range(2):
            counts = {True: [N[t, s, a, S] for t in range(T)], False: [N[t, s, a, :S].sum() for t in range(T)]}
            rpool = {kind: (sum(rsum[kind][t, s, a] for t in range(T)) + SMOOTHING * gmean[kind][a])
                     / (sum(counts[kind]) + SMOOTHING) for kind in (True, False)}
            mpool = sum(N[t, s, a, s2] for t in range(T) for s2 in range(S))
            ppool = [(sum(N[t, s, a, s2] for t in range(T)) + SMOOTHING) / (mpool + SMOOTHING * S) for s2 in range(S)]
            # The last step's ends are the horizon's, not a (state, action)'s risk of ending early.
            expected_ends = sum(N[t, s, a].sum() * hazard[t] for t in range(T - 1))
            risk = (sum(N[t, s, a, S] for t in range(T - 1)) + SMOOTHING) / (expected_ends + SMOOTHING)
            for t in range(T):
                n = sum(N[t, s, a, s2] for s2 in range(S + 1))
                m = n - N[t, s, a, S]
                end = (N[t, s, a, S] + BACKOFF * min(1.0, hazard[t] * risk)) / (n + BACKOFF)
                for s2 in range(S):
                    P[t, s, a, s2] = (1 - end) * (N[t, s, a, s2] + BACKOFF * ppool[s2]) / (m + BACKOFF)
                P[t, s, a, S] = end
                share = 1.0 if t == T - 1 else end  # the horizon ends every episode at the last step
                mean = {kind: (rsum[kind][t, s, a] + BACKOFF * rpool[kind]) / (counts[kind][t] + BACKOFF)
                        for kind in (True, False)}
                R[t, s, a] = share * mean[True] + (1 - share) * mean[False]
    P[T - 1] = 0.0
    P[T - 1, :, :, S] = 1.0

    policies = []
    for C in budgets:
        V = [[0.0] * (C + 1) for _ in range(S)]
        pol = np.zeros((T, S, C + 1))
        for t in range(T - 1, -1, -1):
            newV = [[0.0] * (C + 1) for _ in range(S)]
            for s in range(S):
                for b in range(C + 1):
                    q0 = R[t, s, 0] + sum(P[t, s, 0, s2] * V[s2][b] for s2 in range(S))
                    q1 = R[t, s, 1] + sum(P[t, s, 1, s2] * V[s2][b - 1] for s2 in range(S)) if b > 0 else -math.inf
                    act = q1 > q0 + TIE_TOL * (1 + abs(q0))
                    pol[t, s, b] = act
                    newV[s][b] = q1 if act else q0
            V = newV
        policies.append(pol)

    labels = np.zeros((len(pdf), len(budgets)), dtype=bool)
    for i, row in enumerate(pdf.itertuples(index=False)):
        for j, C in enumerate(budgets):
            if row.budget_left > 0:
                labels[i, j] = policies[j][row.step, row.state, min(row.budget_left, C)] > 0.5
    return policies, labels  # rows in (episode_id, step) order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="logged decision points for the fast path")
    ap.add_argument("--naive-rows", type=int, default=200_000, help="subsample for the naive-vs-fast ratio")
    ap.add_argument("--bins", type=int, default=20)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--budgets", type=int, nargs="+", default=list(range(1, 11)),
                    help="budgets C to solve and label for; the data is collected with the largest (default: 1..10)")
    ap.add_argument("--budget-max", type=int, help=argparse.SUPPRESS)  # the older spelling, refused below
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.budget_max is not None:
        ap.error("--budget-max was renamed: use --budgets (the budgets themselves: --budgets 1 2 3 where --budget-max 3 was)")
    budgets = sorted(set(args.budgets))
    if budgets[0] < 1:
        ap.error(f"--budgets {args.budgets}: give budgets >= 1")
    if args.worker:
        return worker(args.worker, args.bins, budgets)

    t0 = time.perf_counter()
    df = make_data(args.rows, args.steps, args.bins, budgets[-1], args.seed)
    print(
        f"data: {df.height:,} rows, {df['episode_id'].n_unique():,} episodes, {args.steps} steps, "
        f"{args.bins} bins, C = {' '.join(map(str, budgets))} (generated in {time.perf_counter() - t0:.1f}s)"
    )
    print(
        f"machine: {os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"polars {pl.__version__}, pandas {pd.__version__}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        df.write_parquet(path)
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                path,
                "--bins",
                str(args.bins),
                "--budgets",
                *map(str, budgets),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    full = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"fast path, all {full['rows']:,} rows: total {full['total']:.2f}s  (discretize {full['discretize']:.2f}s, "
        f"estimate {full['estimate']:.2f}s, solve {full['solve']:.2f}s for {len(budgets)} budgets, "
        f"label {full['label']:.2f}s; Parquet read {full['read']:.2f}s not included); "
        f"peak RSS {full['peak_rss_mib']:.0f} MiB"
    )

    ends = np.flatnonzero(df["done"].to_numpy())
    sub = df.head(int(ends[np.searchsorted(ends, min(args.naive_rows, df.height) - 1)]) + 1)
    t0 = time.perf_counter()
    _, sols, out = fast_pipeline(sub, args.bins, budgets)
    fast = time.perf_counter() - t0
    pdf = sub.to_pandas()
    t0 = time.perf_counter()
    policies, naive_labels = naive_pipeline(pdf, args.bins, budgets)
    naive = time.perf_counter() - t0
    same_policy = all(np.array_equal(p, s.policy) for p, s in zip(policies, sols))
    order = pdf.sort_values(["episode_id", "step"]).index.to_numpy()
    fast_labels = out.select([f"optimal_intervene_c{c}" for c in budgets]).to_numpy()[order]
    same_labels = np.array_equal(fast_labels, naive_labels)
    print(
        f"same {sub.height:,}-row subsample: naive pandas+loops {naive:.2f}s, fast {fast:.3f}s -> "
        f"ratio {naive / fast:.0f}x  (policies identical: {same_policy}, labels identical: {same_labels})"
    )


if __name__ == "__main__":
    main()
