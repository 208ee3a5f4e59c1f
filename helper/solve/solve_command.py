"""``helpgate solve``: scored trajectories -> optimal helper policy and labels, for each budget.

    helpgate solve --data runs/default/trajectories --budgets 1 2 3 --method exact --out runs/default/solve
    helpgate solve --data runs/agile/trajectories --advice-cost 0.3 --out runs/agile/solve_c0.3

With ``--advice-cost c`` the policy maximises AGILE's total score, success - c * advice rate, with
no budget: the Lagrangian at the fixed multiplier lambda = c / horizon (``tabular_rl.solvers.solve_priced``;
lambda = c with ``--objective reward``). Its table is written as ``policy_c{H}.npz`` (H = horizon,
a budget that cannot bind), so ``helpgate distill`` reads it as any other.

Reads the shards of ``data`` through the one data module (``trajectories.shards.read_trajectories``:
every ``*.parquet`` below the folder, names starting with ``.`` or ``_`` skipped; the columns
solving needs must be there with their types, a wrong type or an unreadable file is refused
naming it, an empty dataset is refused as empty), fits the discretizer, estimates the model once
and solves it for every budget with ``tabular_rl``. The policy maximises the episode's success by
default (``--objective success``; ``--shaping w`` adds w times the logged reward) or the summed
logged reward (``--objective reward``). Writes to ``out``:

* ``discretizer.json``  the fitted discretizer (``Discretizer.load``);
* ``policy_c{C}.npz``   policy and value tables per budget (``Solution.load``);
* ``counts.csv``        rows per (step, state, action): where the data is thin;
* ``labels.parquet``    every input row plus one boolean ``optimal_intervene_c{C}`` per budget;
* ``solution.json``     a summary: data sizes and, per budget, expected success/interventions;
* ``solve.json``        the files this solve wrote, with their hashes (``helper.solve.solve_files``): a
  rerun deletes the outputs it did not write (an older budget's policy), and ``distill`` reads
  only what this file lists.

The solved table is the helper's first member, not its only one: ``helpgate distill`` then chooses, per cap C, among
this solve, its variants (finer bins where rows allow, every step pooled, pessimism) and the threshold on the same
score at 32 levels, the one with the best success on training folds each fitted without it (``helper.solve.select``).
Why: a threshold on the verifier is what a user has without collection, solve and distillation, and whether the
budget-aware table beats it depends on the data: where a score's ranking is all there is, a continuous threshold
loses nothing to bins; where the budget binds and later risk can be read ahead, the table keeps what later steps
need. Choosing on the training folds keeps the helper at least at the best threshold there, and at the table where
the table is better. The expected success printed below is this table's on the model it was solved on (in
sample): the training folds' figures are in the helper's ``members/selection.json``.

With ``time_axis="end"`` (an experiment's option) episodes of different horizons (a text game ends after 3 x its
quest's length + 5 moves) are counted from their ends (``tabular_rl.aligned``): step t from the start is the last
move of a short game and the middle of a long one, and a table over it kept the budget for the short games' last
moves (13, 16, 19, ...) and helped there, too late for most games (TextWorld, benchmarks/RESULTS.md). Counted back
from each episode's end, every deadline is one step; the discretizer records it (``aligned_to``) and the gate shifts
each decision's step by its episode's horizon the same way; ``labels.parquet`` keeps the logged steps. Measured
mixed (better at C = 3, 4, worse at C = 1), so not the default.

With ``--help-kinds compute:1 stronger:2 human:4`` (and ``--help-caps human=1``) on rows that name the help they called
(``help_kind``), the solve decides which help to call under a cost budget: ``helper.solve.tiered_solve``.

Numbers are checked before any work: ``bins`` >= 1, ``smoothing`` and ``shaping`` finite, and the
memory the model's tables need (about ``horizon x states x 2 x states`` numbers, a few copies) is
estimated from the options and the data and refused above ``--memory-limit-gb``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import tyro

from helper.solve import solve_files
from helper.solve.solve_inputs import DEFAULT_BUDGETS, one_outcome, own_rewards, parse_backoff  # noqa: F401 (re-exported)
from tabular_rl.aligned import TIME_AXES, align, longest_if_they_differ
from tabular_rl.discretize import BINNINGS, Discretizer
from tabular_rl.estimate import estimate
from tabular_rl.label import label
from tabular_rl.solvers import SOLVERS, advice_price, solve, solve_priced
from tabular_rl.solvers.pessimism import check_pessimism
from tabular_rl.transitions import OBJECTIVES, Columns
from trajectories.files import write_json_atomic
from trajectories.manifest import incompleteness
from trajectories.outputs import not_another_run, out_folder, outside_inputs
from trajectories.shards import read_trajectories, shard_paths, write_shard

REQUIRED = ("episode_id", "step", "intervened", "budget_left", "reward", "done", "prm_score")
THIN = 10  # a (step, state, action) cell with fewer rows than this is reported as thin


@dataclass
class SolveConfig:
    data: str = "runs/default/trajectories"
    """Directory of scored Parquet shards (must have prm_score)."""
    budgets: list[int] | None = None
    """Intervention budgets C per episode; one solution and one label column each. Default: 1 2 3. None are solved
    with an advice cost (--advice-cost), which solves no budget."""
    method: str = "exact"
    """Solver: exact (hard budget), lagrangian or lp (both: budget in expectation)."""
    bins: int = 10
    """Number of PRM-score bins (NaN scores get one extra unknown state)."""
    binning: str = "quantile"
    """quantile (equal-count bins), uniform (equal-width bins on [0, 1]) or supervised (edges where the agent's own
    step outcome changes: its step reward, or where only the end is rewarded whether it survived the step; a
    regression tree on the score, tabular_rl.supervised_bins)."""
    step_buckets: int = 0
    """Step buckets crossed with the score bins; 0 uses score bins only."""
    smoothing: float = 1.0
    """Dirichlet pseudo-count per next state (and reward prior weight) of the step-pooled estimate."""
    backoff: str = "auto"
    """Weight of the step-pooled estimate in each per-step estimate (thin data backs off): a number,
    or auto (empirical Bayes: large where steps behave alike, small where they differ)."""
    objective: str = "success"
    """What the policy maximises: success (the episode's scored outcome, e.g. winning) or reward
    (the summed logged reward, e.g. TextWorld's progress). Identical where success is the mean reward."""
    shaping: float = 0.0
    """With objective success: weight of the logged reward added as a shaping term (0: none)."""
    advice_cost: float | None = None
    """Advice cost c: solve total score = success - c * advice rate with no budget (lambda = c / horizon,
    or c with --objective reward) instead of the --budgets solutions; unset solves the budgets."""
    pessimism: float = 0.0
    """Standard errors of its estimated own gain (intervening against giving the intervention up) an
    intervention must clear, else the agent acts (tabular_rl.solvers.pessimism): a bin whose gain rests on a thin
    difference spends nothing. 0: the point estimates. Needs --objective success and --method exact."""
    time_axis: str = "start"
    """Count each episode's steps from its start, or from its end ("end": where horizons differ and are a deadline,
    tabular_rl.aligned; on TextWorld with a weak agent +0.15 at C = 4, -0.08 at C = 1: benchmarks/RESULTS.md)."""
    out: str = "runs/default/solve"
    """Output directory: discretizer.json, policy_c{C}.npz, counts.csv, labels.parquet, solution.json, solve.json."""
    memory_limit_gb: float | None = None
    """Refuse settings whose model tables would need more memory than this (default: half of this machine's)."""
    kinds: Annotated[list[str] | None, tyro.conf.arg(name="help_kinds")] = None
    """Kinds of help with their prices, NAME:PRICE or NAME=ACTOR:PRICE each (e.g. compute:1 stronger:2 human:4; the
    actor is recorded for what plays the helper): solve which help to call
    on rows that name it (help_kind), --budgets then in the unit of the prices; writes tiered_policy_c{B}.npz and an
    optimal_kind_c{B} label per budget (helper.solve.tiered_solve). Unset: the one-kind solve."""
    caps: Annotated[list[str] | None, tyro.conf.arg(name="help_caps")] = None
    """With --help-kinds: calls per episode of some kinds, KIND=CALLS each (e.g. human=1); unset kinds are limited by the
    budget only."""
    allow_incomplete: bool = False
    """Read a trajectory folder whose manifest is missing or says complete: false (a collection killed part way)
    as it is, instead of refusing it; recorded in the output."""


TABLE_COPIES = 8
"""Arrays of the size horizon x states x 2 x (states + 1) that estimation holds at once (counts,
moves, shrunk estimates, transitions and their temporaries), as float64."""


def _validate(config: SolveConfig) -> list[int]:
    if config.method not in SOLVERS:
        raise ValueError(f"method={config.method!r}: choose one of {', '.join(SOLVERS)}")
    if config.objective not in OBJECTIVES:
        raise ValueError(f"objective={config.objective!r}: choose one of {', '.join(OBJECTIVES)}")
    if config.binning not in BINNINGS:
        raise ValueError(f"binning={config.binning!r}: choose one of {', '.join(BINNINGS)}")
    if config.advice_cost is not None and config.budgets is not None:
        raise ValueError(f"budgets={config.budgets!r} with advice_cost={config.advice_cost!r}: a priced solve has no "
                         "budget, so the budgets would be ignored; drop --budgets or --advice-cost.")
    budgets = sorted({int(b) for b in (DEFAULT_BUDGETS if config.budgets is None else config.budgets)})
    if not budgets or budgets[0] < 0:
        raise ValueError(f"budgets={config.budgets!r}: give one or more budgets >= 0, e.g. --budgets 1 2 3")
    if config.bins < 1:
        raise ValueError(f"bins={config.bins}: give at least 1 score bin, e.g. --bins 10")
    if config.step_buckets < 0:
        raise ValueError(f"step_buckets={config.step_buckets}: give 0 (no step buckets) or a positive count")
    if not (math.isfinite(config.smoothing) and config.smoothing >= 0):
        raise ValueError(f"smoothing={config.smoothing}: give a finite pseudo-count >= 0, e.g. --smoothing 1")
    if not math.isfinite(config.shaping):
        raise ValueError(f"shaping={config.shaping}: give a finite weight, e.g. --shaping 0")
    if config.memory_limit_gb is not None and not (math.isfinite(config.memory_limit_gb)
                                                   and config.memory_limit_gb > 0):
        raise ValueError(f"memory_limit_gb={config.memory_limit_gb}: give a finite number of GB > 0")
    if config.time_axis not in TIME_AXES:
        raise ValueError(f"time_axis={config.time_axis!r}: choose {' or '.join(TIME_AXES)} (count steps from each "
                         "episode's start or its end)")
    if check_pessimism(config.pessimism) and (config.objective != "success" or config.shaping or config.advice_cost is not None
                             or config.method != "exact"):
        raise ValueError("pessimism: bounds a gain by the range of an episode's success and compares intervening with "
                         "giving the intervention up, so it needs --objective success, --method exact, no --shaping "
                         "and no --advice-cost; drop --pessimism or those options.")
    if config.caps is not None and config.kinds is None:
        raise ValueError(f"caps={' '.join(config.caps)}: caps limit kinds of help; name them with their prices, "
                         "e.g. --help-kinds compute:1 human:4 --help-caps human=1")
    if config.kinds is not None:
        from helper.solve.tiered_solve import check_options

        check_options(config)
    if not str(config.data).strip():
        raise ValueError("data='': name the folder of scored shards, e.g. --data runs/demo/scored")
    outside_inputs(out_folder(config.out, "runs/demo/solve"), {"--data": config.data})  # never into its input
    not_another_run(config.out, "solve")  # nor into or inside another command's folder (a helper, a collection)
    return budgets


def memory_limit_bytes(config: SolveConfig) -> float:
    """``--memory-limit-gb``, or half of this machine's physical memory."""
    if config.memory_limit_gb is not None:
        return config.memory_limit_gb * 2**30
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2
    except (ValueError, OSError, AttributeError):  # a platform without sysconf: a fixed 8 GB
        return 8 * 2**30


def check_memory(config: SolveConfig, horizon: int, budgets: list[int]) -> None:
    """Refuse, before allocating, a setting whose tables would not fit (naming what makes them big)."""
    states = (config.bins + 1) * max(config.step_buckets, 1)
    model = TABLE_COPIES * 8.0 * horizon * states * 2 * (states + 1)
    solver = 2 * 8.0 * horizon * states * (max(budgets) + 1)  # policy and value tables
    need, limit = model + solver, memory_limit_bytes(config)
    if need > limit:
        raise ValueError(
            f"bins={config.bins}, step_buckets={config.step_buckets} and a horizon of {horizon} steps (the largest "
            f"step + 1 in {config.data}) make {states:,} states, whose tables need about {need / 2**30:,.1f} GB, "
            f"more than the limit of {limit / 2**30:,.1f} GB; lower --bins / --step-buckets, check the step "
            f"column, or raise --memory-limit-gb.")


def total_score(solution, config: SolveConfig, model) -> float:
    """The priced solution's expected objective: success (or return) - c * advice rate."""
    value = solution.expected_success if config.objective == "success" else solution.expected_return
    return float(value - solution.lam * solution.expected_interventions)


def run(config: SolveConfig) -> dict:
    """Discretize, estimate, solve for every budget, label; write ``config.out``; return the summary."""
    budgets = _validate(config)
    if config.kinds is not None:  # which help to call, each kind at its price
        from helper.solve import tiered_solve

        return tiered_solve.run(config, REQUIRED, THIN)
    backoff = parse_backoff(config.backoff)
    shards = shard_paths(config.data, allow_incomplete=None)  # read_trajectories refuses an unfinished one
    df = read_trajectories(config.data, require=REQUIRED, allow_incomplete=config.allow_incomplete)
    unfinished = incompleteness(config.data) if Path(config.data).is_dir() else None
    one_outcome(df, config.data)
    longest = int(df.group_by("episode_id").len()["len"].max())
    if config.advice_cost is not None:
        advice_price(config.advice_cost, config.objective, 1)  # a bad cost is refused before any work
    elif budgets[-1] > longest:
        # A budget past the longest episode changes nothing and would size the tables by it.
        raise ValueError(f"budget={budgets[-1]}: the longest episode in {config.data} has {longest} decisions, so "
                         f"any budget >= {longest} intervenes everywhere it can; give budgets up to {longest}.")
    check_memory(config, int(df["step"].max()) + 1, budgets)
    cols = Columns()
    # time_axis end: episodes of different horizons counted from their ends (tabular_rl.aligned).
    to = longest_if_they_differ(df, cols) if config.time_axis == "end" else None
    work = align(df, to, cols)
    disc = Discretizer(config.bins, config.binning, config.step_buckets).fit(
        work[cols.score], work[cols.step], own_rewards(df, cols) if config.binning == "supervised" else None)
    disc.aligned_to = to
    model = estimate(work, disc, columns=cols, smoothing=config.smoothing, backoff=backoff,
                     objective=config.objective, shaping=config.shaping)
    if config.advice_cost is None:
        solutions = [solve(model, c, config.method, config.pessimism) for c in budgets]
    else:
        price = advice_price(config.advice_cost, config.objective, model.horizon)
        solutions = [solve_priced(model, price)]

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    solve_files.begin(out)
    disc.save(out / "discretizer.json")
    counts = model.counts_frame()
    counts.write_csv(out / "counts.csv")
    for sol in solutions:
        sol.save(out / f"policy_c{sol.budget}.npz")
    write_shard(label(work, solutions, columns=cols).with_columns(df[cols.step]), out / "labels.parquet",
                require=REQUIRED)

    n_thin = int((counts["n"] < THIN).sum())
    summary = {
        "config": asdict(config),
        "incomplete_input": unfinished,
        "data": {
            "shards": len(shards),
            "rows": df.height,
            "episodes": df[cols.episode].n_unique(),
            "horizon": model.horizon,
            "n_states": model.n_states,
            "reward_backoff": model.backoff,
            "transition_backoff": model.transition_backoff,
            "truncated_episodes": model.n_truncated,
            f"cells_with_fewer_than_{THIN}_rows": n_thin,
            "cells": counts.height,
        },
        "labels": {"file": "labels.parquet", "columns": [f"optimal_intervene_c{c}" for c in budgets]},
        "solutions": [sol.summary() | {"policy_file": f"policy_c{sol.budget}.npz"}
                      | ({} if config.advice_cost is None else {"advice_cost": config.advice_cost,
                                                                 "total_score": total_score(sol, config, model)})
                      for sol in solutions],
    }
    write_json_atomic(summary, out / "solution.json")
    written = [*solve_files.FIXED_OUTPUTS, *(f"policy_c{sol.budget}.npz" for sol in solutions)]
    solve_files.finish(out, written, [sol.budget for sol in solutions], config.advice_cost, unfinished)

    if to is not None:
        print(f"episodes have horizons up to {to}: steps counted back from each episode's end (tabular_rl.aligned)")
    print(
        f"{df.height} rows, {model.horizon} steps, {model.n_states} states; {n_thin}/{counts.height} "
        f"(step, state, action) cells have fewer than {THIN} rows (see {out / 'counts.csv'}); back-off weight "
        f"{model.backoff:.3g} for rewards, {model.transition_backoff:.3g} for transitions"
    )
    if config.advice_cost is not None:
        sol = solutions[0]
        print(f"advice cost c={config.advice_cost:g} (lambda {sol.lam:.4g}, no budget): expected success "
              f"{sol.expected_success:.4f}  expected interventions {sol.expected_interventions:.3f}  "
              f"expected total score {total_score(sol, config, model):.4f}")
        return summary
    for sol in solutions:
        print(
            f"C={sol.budget:<3d} {sol.method:<10s} expected success {sol.expected_success:.4f}  "
            f"expected interventions {sol.expected_interventions:.3f}  expected return {sol.expected_return:.4f}"
        )
    return summary
