"""``helpgate sweep``: every method at every budget C of ``--budgets``, the same held-out episodes.

    helpgate sweep --helper runs/demo/helper --out runs/demo/sweep

Each method is a class of the registry ``helper.evaluation.methods.METHODS`` (one interface: prepare, then a
gate per budget) evaluated by ``helper.evaluation.play.evaluate_gate``: fresh held-out episodes, the same
base agent and strong actor, ``run_episodes(..., gate=gate, budget=C)`` per budget. The methods
and how each is built or trained are listed in ``helper.evaluation.methods``.

Budgets go by default from 0 up to always-intervene's mean interventions per episode (rounded
up: ProductQA's questions per episode; TextWorld's mean episode length under always;
``agile.budget.largest_budget``), so every
method's PGR curve is measured over the whole intervention-share range [0, 1] where the method
spends that much; ``summary.json`` says per method how much of its APGR was completed rather than
measured (``apgr_extrapolated_share``, see ``helper.evaluation.metrics``).

Training rows (for ``prm_threshold``, ``router`` and ``knn``) default to the ``labels.parquet`` of the
solve folder the helper was distilled from. Writes ``out``: ``sweep.csv`` (method, budget,
success, interventions, episodes, ci_low, ci_high, and ``nil_gain_interventions`` where the env counts
interventions that could gain nothing), ``episodes.csv`` (method, budget, episode_id, group, success,
interventions: what ``helpgate report`` resamples), ``summary.json``
(``helper.evaluation.metrics.summarize`` plus training calls, skipped methods, config, each threshold method's
levels, and ``at_spend``: the priced helper against each threshold-type baseline's no-cap curve at its spend,
``helper.evaluation.spend``), ``sweep.png`` (under a cap, and at a spend), and ``online_rl_curve.png`` when the
online-RL report can draw one.

Two yardsticks, each like for like. *Under a cap C*: every method plays with at most C interventions an episode,
each threshold-type baseline (``prm_threshold``, ``router``, ``knn``) at the level chosen on the training folds for
the best success under that cap, the helper at the member chosen the same way (``helper.solve.select``). *At an
average spend*, no cap: ``helper_priced`` priced to spend s interventions an episode against each such baseline's
no-cap curve (rows ``<method>_nocap``) read at its spend (``helper.evaluation.spend``).

A helper that chooses which help to call (its ``helper.json`` names kinds) is swept by
``helper.evaluation.tiered_sweep`` instead: under cost budgets, against one-kind helpers, a cascade and a random kind.

Common random numbers: every method's C = 0 row must be the same outcomes episode by episode; the sweep
checks it (``check_c0_rows``, ``summary.json``'s ``c0_check``) and warns, naming the spread, where not.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from helper.data.environment import EnvConfig, Environment
from helper.evaluation.methods import METHODS as REGISTRY
from helper.evaluation.methods import SweepContext
from helper.evaluation.metrics import summarize, sweep_columns
from helper.evaluation.plots import save_sweep_plot
from helper.evaluation import tiered_sweep
from helper.evaluation.spend import at_spend
from helper.evaluation.tiered_sweep import is_tiered
from helper.stored_config import flat
from trajectories.files import write_json_atomic

METHODS = tuple(REGISTRY)
Method = Literal[METHODS]  # type: ignore[valid-type]
"""A method's name: the registry's keys, so ``--methods`` lists (and accepts) exactly those."""


@dataclass
class SweepConfig(EnvConfig):
    helper: str = "runs/default/helper"
    """Helper folder written by `helpgate distill`."""
    out: str = "runs/default/sweep"
    """Folder for sweep.csv, episodes.csv, summary.json and sweep.png."""
    budgets: list[int] | None = None
    """Budgets C (interventions per episode) every method plays (default: 0 up to always-intervene's mean
    interventions, rounded up, so the sweep covers the whole intervention-share range)."""
    methods: list[Method] = field(default_factory=lambda: list(METHODS))
    """Methods to evaluate (never and always are always added: PGR needs them)."""
    train_data: str | None = None
    """Training rows (Parquet file or folder) for prm_threshold and router (default: the helper's labels)."""
    allow_incomplete: bool = False
    """Read a trajectory folder whose manifest is missing or says complete: false (a collection killed part way)
    as --train-data as it is, instead of refusing it; recorded in the output."""
    helper_backend: str | None = None
    """Override the helper's backend (features, text, table)."""
    prm: str | None = None
    """Score with this PRM folder instead of the one the helper names."""
    rl_timesteps: int = 60_000
    """online_rl: most training decisions (PPO timesteps), if its learning curve has not flattened before."""
    rl_n_steps: int = 256
    """online_rl: decisions collected per environment copy (4 copies) between two PPO updates."""
    rl_eval_every: int = 4096
    """online_rl: training decisions between two points of its learning curve."""
    rl_val_episodes: int = 128
    """online_rl: training-split validation episodes per budget at each learning-curve point."""
    rl_lr: float = 1e-3
    """online_rl: Adam learning rate."""
    rl_train_episodes: int | None = None
    """online_rl: replay this many training episodes in turn (default: a fresh episode at every reset). An LLM
    base agent answers a replayed history from its cache: the way to a flattened curve on a CPU."""
    rl_use_prm: bool = True
    """online_rl: give the policy the PRM score too (one PRM pass per training decision)."""
    ci_resamples: int = 2000
    """Bootstrap resamples of each 95 percent confidence interval."""
    title: str | None = None
    """Title of sweep.png."""
    decide_after: Literal["state", "proposal"] | None = None
    """When the helper, prm_threshold and router decide: before the base agent acts (state) or after reading
    its proposal (proposal; needs a helper whose PRM was trained with --tag-after proposal). Default: the
    helper's own."""
    random_rounds: int = 8
    """random: at most this many runs per budget to match the helper's mean interventions (it stops
    once within 0.02 of them; each run corrects the rate)."""
    knn_k: int = 10
    """knn: nearest training decision points whose failure share is the score."""
    knn_encoder: str = "minilm"
    """knn: sentence encoder of the decision points: minilm (the embedded all-MiniLM-L6-v2), a local encoder folder,
    or tiny (a random two-layer BERT with MiniLM's tokenizer, for tests)."""


def run(cfg: SweepConfig, scorer=None) -> dict:
    """Run the sweep; returns the summary. ``scorer`` (Python API) replaces the PRM for every method."""
    from helper.evaluation.play import load_helper

    if set(cfg.methods) - set(REGISTRY):
        raise ValueError(f"methods={sorted(set(cfg.methods) - set(REGISTRY))}: unknown; choose from {METHODS}.")
    if cfg.budgets is not None and (not cfg.budgets or min(cfg.budgets) < 0):
        raise ValueError(f"budgets={cfg.budgets}: give one or more budgets >= 0 (e.g. --budgets 0 1 2), or leave "
                         "them out for 0 up to always-intervene's interventions.")
    from trajectories.outputs import not_a_finished_stage, not_another_run, out_folder

    out = not_a_finished_stage(out_folder(cfg.out, "runs/demo/sweep"))  # never '' nor another run's finished sweep/
    not_another_run(out, "sweep")  # nor a helper's, a collection's or an evaluation's folder
    out.mkdir(parents=True, exist_ok=True)
    if is_tiered(cfg.helper):  # a helper that chooses which help to call: its own family, under cost budgets
        return tiered_sweep.run(cfg, out, scorer)
    ctx = SweepContext(cfg=cfg, env=Environment(cfg), out=out)
    wanted = set(cfg.methods) | {"never", "always"}
    if any({"helper", "prm"} & REGISTRY[name].needs for name in wanted):
        ctx.helper = load_helper(cfg, cfg.helper_backend)
        if scorer is not None:
            ctx.helper.scorer = scorer
        ctx.helper_config = json.loads((Path(cfg.helper) / "helper.json").read_text())
    ctx.scorer = scorer or (ctx.helper.scorer if ctx.helper is not None else None)
    ctx.decide_after = _decide_after(cfg, ctx)

    calls, skipped, seconds = {}, {}, {}
    for name, kind in REGISTRY.items():
        if name not in wanted:
            continue
        started = time.perf_counter()
        method = kind()
        reason = method.prepare(ctx)
        if reason:
            skipped[name] = reason
            continue
        ctx.playing = method
        method.run(ctx)
        ctx.playing = None
        calls[method.row] = method.training_calls(ctx)
        seconds[name] = round(time.perf_counter() - started, 1)

    rows, per_episode, helper = ctx.rows, ctx.per_episode, ctx.helper
    frame = pd.DataFrame(rows, columns=sweep_columns(rows))
    frame.to_csv(out / "sweep.csv", index=False)
    pd.DataFrame(per_episode).to_csv(out / "episodes.csv", index=False)
    summary = summarize(frame, calls)
    summary["skipped"] = skipped
    summary["c0_check"] = check_c0_rows(per_episode)
    summary["at_spend"] = at_spend(per_episode)
    summary["budgets"] = ctx.budgets
    summary["method_seconds"] = seconds  # wall time per method (prepare and play), where a sweep's time goes
    summary.update(ctx.extra)
    summary["decide_after"] = ctx.decide_after
    summary["config"] = flat(cfg)
    if helper is not None:
        summary["helper_stats"] = helper.stats()
    if hasattr(ctx.scorer, "memo_hits"):  # how much PRM work the shared prefixes saved
        summary["prm_scores"] = {"forward": ctx.scorer.forward_scores, "reused": ctx.scorer.memo_hits,
                                 "fed_tokens": getattr(ctx.scorer, "fed_tokens", None)}
    policy = getattr(ctx.env.base, "policy", None)
    if getattr(policy, "memo_hits", 0):  # the base agent's turns that replayed sessions shared
        summary["agent_turns"] = {"generated_tokens": policy.generated_tokens, "reused_turns": policy.memo_hits}
    write_json_atomic(summary, out / "summary.json")
    save_sweep_plot(frame, out / "sweep.png", cfg.title)
    _print(summary, out)
    return summary


def check_c0_rows(per_episode: list[dict]) -> dict:
    """Every method's C = 0 row plays the same episodes with no intervention, so with common random numbers
    (an agent drawing per decision, ``Observation.rng()``) their outcomes are equal episode by episode. Where
    they are not, warn, naming the spread of the mean success across methods: the comparisons are then not
    paired on the agent's draws. Returns what ``summary.json`` records as ``c0_check``."""
    rows: dict[str, list[tuple[str, float]]] = {}
    for row in per_episode:
        if int(row["budget"]) == 0:
            rows.setdefault(row["method"], []).append((str(row["episode_id"]), float(row["success"])))
    if len(rows) < 2:
        return {"methods": sorted(rows), "equal": True, "episodes_differing": 0}
    ids = {method: [e for e, _ in played] for method, played in rows.items()}
    first = next(iter(ids.values()))
    if any(other != first for other in ids.values()):
        raise ValueError(f"the C = 0 rows of {sorted(rows)} played other episodes; every method plays the same "
                         "held-out episodes (env.episodes()), so this is a bug of the method that did not.")
    table = np.array([[s for _, s in played] for played in rows.values()])  # (methods, episodes)
    differing = int((table.max(axis=0) != table.min(axis=0)).sum())
    means = dict(zip(rows, table.mean(axis=1).tolist()))
    low, high = min(means, key=means.get), max(means, key=means.get)
    check = {"methods": sorted(rows), "equal": differing == 0, "episodes_differing": differing,
             "episodes": table.shape[1], "success_min": [low, means[low]], "success_max": [high, means[high]]}
    if differing:
        warnings.warn(f"C = 0 rows differ across methods on the same {table.shape[1]} episodes: mean success from "
                      f"{means[low]:.3f} ({low}) to {means[high]:.3f} ({high}), {differing} episode(s) differ. With no "
                      "intervention every method should meet the same outcomes: the base agent's draws are not keyed "
                      "per decision (draw from observation.rng(), or seed from observation.episode_id and step), so "
                      "the comparisons are not paired on them.", stacklevel=2)
    return check


def _decide_after(cfg: SweepConfig, ctx: SweepContext) -> str:
    """The one mode of every score-reading method: the helper's (its PRM's), or the configured one."""
    own = getattr(ctx.helper, "decide_after", None) or getattr(ctx.scorer, "decide_after", None)
    if cfg.decide_after and own and cfg.decide_after != own:
        raise ValueError(f"decide_after={cfg.decide_after!r}, but the helper {cfg.helper} decides after its "
                         f"{own}: its PRM was trained for that. Pass --decide-after {own}, or use a helper distilled "
                         f"from a PRM trained with --tag-after {cfg.decide_after}.")
    return cfg.decide_after or own or "state"


def _print(summary: dict, out: Path) -> None:
    print(f"{'method':>14s}  {'APGR':>6s}  {'extrap':>6s}  {'CPT50':>6s}  {'CPT80':>6s}  calls")
    for method, entry in sorted(summary["methods"].items(), key=lambda kv: -(kv[1]["apgr"] or -9)):
        fmt = lambda v: "  none" if v is None else f"{v:6.3f}"
        print(f"{method:>14s}  {fmt(entry['apgr'])}  {fmt(entry['apgr_extrapolated_share'])}  {fmt(entry['cpt50'])}  {fmt(entry['cpt80'])}  "
              f"{entry['training_calls']}")
    for method, reason in summary["skipped"].items():
        print(f"{method:>14s}  skipped: {reason}")
    print(f"sweep: wrote {out / 'sweep.csv'}, {out / 'summary.json'}, {out / 'sweep.png'}")
