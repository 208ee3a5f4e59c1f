"""``helpgate solve --help-kinds``: which help to call, each kind at its price, under a cost budget per episode.

    helpgate solve --data runs/tiered/scored --help-kinds compute:1 stronger:2 human:4 --help-caps human=1 \
        --budgets 2 4 6 --out runs/tiered/solve

The rows name the help each decision called (``help_kind``: the kind's name, "" where the agent acted). The
discretizer is fitted as in the one-kind solve, the K + 1-action model is estimated once
(``tabular_rl.tiered.estimate_tiered``: each kind by its paired gain over the agent where every row logs the
agent's own outcome and decisions are separate questions) and solved per budget B, in the unit of the prices
(``solve_tiered``: ``--method exact`` or ``lagrangian``); ``--help-caps`` bounds some kinds' calls per episode.
Writes to ``out``, as the one-kind solve does (``helper.solve.solve_files`` records them in ``solve.json``,
with the kinds, prices and caps):

* ``discretizer.json``, ``counts.csv`` (rows per step, state and action: ``agent`` or a kind);
* ``tiered_policy_c{B}.npz``: the tables per budget (``TieredSolution.load``);
* ``labels.parquet``: every input row plus ``optimal_kind_c{B}``, the kind the helper calls there ("": the agent
  acts), its budget left rebuilt from the episode's earlier logged calls (``tabular_rl.tiered.label``);
* ``solution.json``: data sizes and, per budget, expected success, cost and calls per kind.

Without ``--help-kinds`` the solve is the one-kind solve, unchanged (``helper.solve.solve_command``), whether or not the
rows carry ``help_kind``. Every refusal is one line naming the flag and its value.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import polars as pl

from helper.solve import solve_files
from tabular_rl.discretize import Discretizer
from tabular_rl.tiered import Resources, estimate_tiered, label_tiered, solve_tiered
from tabular_rl.choice.replay import replayable
from tabular_rl.tiered.estimate import BASE_COLUMN, KIND_COLUMN
from tabular_rl.tiered.label import budget_name
from tabular_rl.transitions import Columns
from trajectories.files import write_json_atomic
from trajectories.helps import split_actor
from trajectories.manifest import incompleteness
from trajectories.shards import read_trajectories, shard_paths, write_shard

METHODS = ("exact", "lagrangian")
EXAMPLE = "e.g. --help-kinds compute:1 stronger:2 human:4"


def parse_kinds(kinds: list[str]) -> dict[str, float]:
    """``["compute:1", "human:4"]`` -> ``{"compute": 1.0, "human": 4.0}``, each price finite and > 0 (a kind given as
    ``NAME=ACTOR:PRICE`` by its name: the solve reads names, ``actors_of`` keeps who answers)."""
    if not kinds:
        raise ValueError(f"kinds=[]: name each kind of help with its price, {EXAMPLE}")
    prices: dict[str, float] = {}
    for item in kinds:
        named, colon, price = str(item).rpartition(":")
        name = split_actor(named)[0]
        if not colon or not name.strip():
            raise ValueError(f"kinds={item!r}: give each kind as NAME:PRICE, {EXAMPLE}")
        try:
            value = float(price)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"kinds={item!r}: the price of {name} must be a finite number > 0 (a call costs "
                             f"something, or it needs no budget), {EXAMPLE}")
        if name in prices:
            raise ValueError(f"kinds={item!r}: {name} is named twice; give each kind once, {EXAMPLE}")
        prices[name] = value
    return prices


def actors_of(kinds: list[str]) -> dict[str, str]:
    """Who answers each kind given as ``NAME=ACTOR:PRICE`` (the others are answered by their name)."""
    pairs = (split_actor(str(item).rpartition(":")[0]) for item in kinds)
    return {name: actor for name, actor in pairs if actor}


def parse_caps(caps: list[str] | None, prices: dict[str, float]) -> dict[str, int]:
    """``["human=1"]`` -> ``{"human": 1}``, each a kind of ``--help-kinds`` with a whole number of calls >= 0."""
    out: dict[str, int] = {}
    for item in caps or []:
        name, eq, calls = str(item).partition("=")
        if not eq or not calls.strip().isdigit():
            raise ValueError(f"caps={item!r}: give each cap as KIND=CALLS, a whole number of calls per episode "
                             "(e.g. --help-caps human=1)")
        if name not in prices:
            raise ValueError(f"caps={item!r}: {name!r} is not among --help-kinds ({', '.join(prices)}); cap a kind you "
                             "priced, or add it to --help-kinds")
        out[name] = int(calls)
    return out


def check_options(config) -> tuple[dict[str, float], dict[str, int]]:
    """The prices and caps of a tiered solve, refusing options it cannot honour (before any data is read)."""
    prices = parse_kinds(config.kinds)
    caps = parse_caps(config.caps, prices)
    if config.method not in METHODS:
        raise ValueError(f"method={config.method!r}: a solve with --help-kinds is {' or '.join(METHODS)}")
    for flag, value, unset in (("advice_cost", config.advice_cost, None), ("pessimism", config.pessimism, 0.0)):
        if value != unset:
            raise ValueError(f"{flag}={value!r}: not with --help-kinds (the tiered solve prices each kind itself); drop "
                             f"--{flag.replace('_', '-')}")
    return prices, caps


def check_rows(df: pl.DataFrame, prices: dict[str, float], data: str) -> None:
    """The rows must name the help they called, every priced kind at least once, and no other kind."""
    if KIND_COLUMN not in df.columns:
        raise ValueError(f"kinds={' '.join(f'{k}:{p:g}' for k, p in prices.items())}: the rows in {data} carry no "
                         f"{KIND_COLUMN} column (a one-kind collection); collect with several kinds, or drop --help-kinds")
    called = set(df[KIND_COLUMN].cast(pl.String).fill_null("").unique().to_list()) - {""}
    for kind, price in prices.items():
        if kind not in called:
            raise ValueError(f"kinds={kind}:{price:g}: no row of {data} called {kind} ({KIND_COLUMN}); the rows call "
                             f"{sorted(called)}: drop it from --help-kinds or collect with it")
    extra = sorted(called - set(prices))
    if extra:
        raise ValueError(f"kinds: the rows of {data} also call {extra} ({KIND_COLUMN}); price every kind they call, "
                         f"e.g. --help-kinds {' '.join(f'{k}:{p:g}' for k, p in prices.items())} {extra[0]}:PRICE")


def counts_frame(model) -> pl.DataFrame:
    """Rows per (step, state, action), the action named (``agent`` or a kind): where the data is thin."""
    T, S, A = model.counts.shape
    t, s, a = (g.ravel() for g in np.indices((T, S, A)))
    score_bin, bucket = model.discretizer.split(s)
    return pl.DataFrame({"step": t, "state": s, "score_bin": score_bin, "step_bucket": bucket,
                         "action": np.array(["agent", *model.kinds])[a], "n": model.counts.ravel()})


def run(config, required: tuple[str, ...], thin: int) -> dict:
    """The tiered solve of ``config`` (a ``SolveConfig`` with ``kinds``); see the module docstring."""
    from helper.solve.solve_inputs import DEFAULT_BUDGETS, one_outcome, own_rewards, parse_backoff

    prices, caps = check_options(config)
    budgets = sorted({int(b) for b in (DEFAULT_BUDGETS if config.budgets is None else config.budgets)})
    backoff = parse_backoff(config.backoff)
    shards = shard_paths(config.data, allow_incomplete=None)
    df = read_trajectories(config.data, require=required, allow_incomplete=config.allow_incomplete)
    unfinished = incompleteness(config.data) if Path(config.data).is_dir() else None
    one_outcome(df, config.data)
    check_rows(df, prices, config.data)
    longest = int(df.group_by("episode_id").len()["len"].max())
    most = longest * max(prices.values())
    if budgets[-1] > most:
        raise ValueError(f"budgets={budgets[-1]}: the longest episode in {config.data} has {longest} decisions, so "
                         f"it can spend at most {most:g} (every decision the dearest kind); give budgets up to "
                         f"{most:g}")
    cols = Columns()
    disc = Discretizer(config.bins, config.binning, config.step_buckets).fit(
        df[cols.score], df[cols.step], own_rewards(df, cols) if config.binning == "supervised" else None)
    kinds = tuple(prices)
    paired = replayable(df, BASE_COLUMN)
    model = estimate_tiered(df, disc, kinds, columns=cols, smoothing=config.smoothing, backoff=backoff, paired=paired,
                            objective=config.objective, shaping=config.shaping)
    cap_list = [caps.get(k) for k in kinds]
    solutions = [solve_tiered(model, Resources.of(list(prices.values()), b, cap_list, horizon=model.horizon),
                              config.method) for b in budgets]

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    solve_files.begin(out)
    disc.save(out / "discretizer.json")
    counts = counts_frame(model)
    counts.write_csv(out / "counts.csv")
    names = [f"tiered_policy_c{b}.npz" for b in budgets]
    for sol, name in zip(solutions, names):
        sol.save(out / name)
    write_shard(label_tiered(df, solutions, disc, columns=cols), out / "labels.parquet", require=required)
    n_thin = int((counts["n"] < thin).sum())
    tiered = {"kinds": list(kinds), "prices": prices, "caps": caps}
    tiered |= {"actors": actors} if (actors := actors_of(config.kinds)) else {}
    summary = {
        "config": asdict(config), "incomplete_input": unfinished, "tiered": tiered,
        "data": {"shards": len(shards), "rows": df.height, "episodes": df[cols.episode].n_unique(),
                 "horizon": model.horizon, "n_states": model.n_states, "truncated_episodes": model.n_truncated,
                 "paired_gains": paired,
                 f"cells_with_fewer_than_{thin}_rows": n_thin, "cells": counts.height,
                 "calls": {k: int((df[KIND_COLUMN] == k).sum()) for k in kinds}},
        "labels": {"file": "labels.parquet", "columns": [f"optimal_kind_c{budget_name(s)}" for s in solutions]},
        "solutions": [sol.summary() | {"policy_file": name} for sol, name in zip(solutions, names)],
    }
    write_json_atomic(summary, out / "solution.json")
    solve_files.finish(out, [*solve_files.FIXED_OUTPUTS, *names], budgets, None, unfinished, tiered=tiered)
    print(f"{df.height} rows, {model.horizon} steps, {model.n_states} states, kinds "
          f"{', '.join(f'{k} at {p:g}' for k, p in prices.items())}{f', caps {caps}' if caps else ''}; "
          f"{n_thin}/{counts.height} (step, state, action) cells have fewer than {thin} rows")
    for b, sol in zip(budgets, solutions):
        calls = "  ".join(f"{k} {c:.3f}" for k, c in zip(kinds, sol.expected_calls[1:]))
        print(f"B={b:<3d} {sol.method:<10s} expected success {sol.expected_success:.4f}  expected cost "
              f"{sol.expected_cost:.3f}  calls: {calls}")
    return summary
