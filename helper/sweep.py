"""``helpgate sweep``: every method, budgets C = 0..max_budget, the same held-out episodes.

    helpgate sweep --helper runs/demo/helper --max-budget 3 --out runs/demo/sweep

Each method is a gate (``helper.baselines``, ``helper.online_rl``, ``HelperGate``) evaluated by
``helper.evaluate.evaluate_gate``: fresh held-out episodes, the same base agent and strong actor,
``run_episodes(..., gate=gate, budget=C)`` per budget.

- ``helper``: the distilled helper (``HelperGate.load(--helper)``).
- ``never`` (C = 0) and ``always`` (C = the horizon: questions per episode for ProductQA, the
  longest episode of a game for TextWorld, i.e. every decision): the PGR references, one row each.
- ``first_k``: the first C decisions. ``random``: intervene with probability = the helper's
  interventions per decision at the same C (C / horizon without a helper), capped at C.
- ``prm_threshold``: intervene when the PRM score is at or below a threshold calibrated on the
  training rows so that about C decisions per episode fall there (needs the helper's PRM).
- ``router``: a classifier trained on the training rows where the base agent acted, predicting
  its failure (reward < 0.5) from the question features (no PRM, no budget), thresholded like
  ``prm_threshold`` on its predicted success.
- ``online_rl``: REINFORCE MLP trained in the environment on training episodes (its strong/human
  calls are counted).
- ``oracle``: hindsight bound from one counterfactual run of the held-out episodes; per episode,
  the C decision points whose intervention gains most.
- ``exact_optimal``: ProductQA simulator agent only (no memory boost): backward induction on the
  true model; skipped, with the reason in ``summary.json``, elsewhere.

Training rows (for ``prm_threshold`` and ``router``) default to the ``labels.parquet`` of the
solve folder the helper was distilled from. Writes ``out``: ``sweep.csv`` (method, budget,
success, interventions, episodes, ci_low, ci_high), ``episodes.csv``, ``summary.json``
(``helper.metrics.summarize`` plus training calls, skipped methods, config) and ``sweep.png``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import polars as pl

from agile.productqa import QUESTION_TYPES
from agile.productqa_env import question_type
from helper import baselines as B
from helper.environment import EnvConfig, Environment
from helper.evaluate import evaluate_gate
from helper.metrics import SWEEP_COLUMNS, summarize
from helper.plots import save_sweep_plot
from helper.schema import write_json_atomic

METHODS = ("helper", "never", "always", "random", "prm_threshold", "first_k", "router", "online_rl", "oracle",
           "exact_optimal")
Method = Literal["helper", "never", "always", "random", "prm_threshold", "first_k", "router", "online_rl",
                 "oracle", "exact_optimal"]


@dataclass
class SweepConfig(EnvConfig):
    helper: str = "runs/default/helper"
    """Helper folder written by `helpgate distill`."""
    out: str = "runs/default/sweep"
    """Folder for sweep.csv, episodes.csv, summary.json and sweep.png."""
    max_budget: int = 3
    """Budgets C = 0..max_budget interventions per episode."""
    methods: list[Method] = field(default_factory=lambda: list(METHODS))
    """Methods to evaluate (never and always are always added: PGR needs them)."""
    train_data: str | None = None
    """Training rows (Parquet file or folder) for prm_threshold and router (default: the helper's labels)."""
    helper_backend: str | None = None
    """Override the helper's backend (features, text, table)."""
    prm: str | None = None
    """Score with this PRM folder instead of the one the helper names."""
    rl_iterations: int = 60
    """online_rl: policy-gradient steps."""
    rl_episodes: int = 32
    """online_rl: training episodes per step."""
    rl_lr: float = 0.01
    """online_rl: Adam learning rate."""
    rl_use_prm: bool = True
    """online_rl: give the policy the PRM score too (one PRM pass per training decision)."""
    ci_resamples: int = 2000
    """Bootstrap resamples of each 95 percent confidence interval."""
    title: str | None = None
    """Title of sweep.png."""


def _training_rows(cfg: SweepConfig, helper_config: dict) -> pl.DataFrame | None:
    if cfg.train_data:
        path = Path(cfg.train_data)
        return pl.read_parquet(path if path.is_file() else path / "*.parquet")
    source = helper_config.get("labels_from")
    if source and (Path(source) / "labels.parquet").exists():
        return pl.read_parquet(Path(source) / "labels.parquet")
    return None


def _router(rows: pl.DataFrame, seed: int):
    """(classifier, feature names) predicting base failure; its score is P(base succeeds)."""
    from helper.features import FeatureClassifier, feature_keys, frame_features

    names = ["step", "horizon", "progress", "steps_left"] + [f"f_{k}" for k in feature_keys(rows)]
    base = rows.filter(pl.col("actor") == "base")
    fail = (base["reward"].to_numpy() < 0.5).astype(int)
    model = FeatureClassifier("gbm", names, random_state=seed).fit(frame_features(base, names), fail)
    train_success = 1.0 - model.predict_proba(frame_features(rows, names))
    return model, names, train_success


def run(cfg: SweepConfig, scorer=None) -> dict:
    """Run the sweep; returns the summary. ``scorer`` (Python API) replaces the PRM for every method."""
    from helper.evaluate import load_helper
    from helper.features import observation_features

    env = Environment(cfg)
    budgets = list(range(cfg.max_budget + 1))
    methods = [m for m in METHODS if m in set(cfg.methods) | {"never", "always"}]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, per_episode, calls, skipped = [], [], {}, {}

    def evaluate(method, gate_for_budget, method_budgets=budgets, counterfactual=False):
        result = evaluate_gate(env, gate_for_budget, method_budgets, method, cfg.ci_resamples, counterfactual)
        rows.extend(result[0])
        per_episode.extend(result[1])
        return result

    helper, helper_config = None, {}
    if "helper" in methods or "prm_threshold" in methods:
        helper = load_helper(cfg, cfg.helper_backend)
        if scorer is not None:
            helper.scorer = scorer
        helper_config = json.loads((Path(cfg.helper) / "helper.json").read_text())
    score = scorer or (helper.scorer if helper is not None else None)
    offline_calls = {k: helper_config.get("training_calls", {}).get(k, 0) for k in ("strong", "human")}
    train_rows = _training_rows(cfg, helper_config) if {"prm_threshold", "router"} & set(methods) else None
    zero = {"strong": 0, "human": 0}

    helper_usage = {}
    for method in methods:
        if method == "helper":
            evaluate("helper", helper.with_budget)
            helper_usage = {r["budget"]: r["interventions"] for r in rows if r["method"] == "helper"}
            calls["helper"] = offline_calls
        elif method == "never":
            evaluate("never", lambda c: B.NeverGate(c), [0])
            calls["never"] = zero
        elif method == "always":
            evaluate("always", lambda c: B.AlwaysGate(c), [env.horizon])
            calls["always"] = zero
        elif method == "first_k":
            evaluate("first_k", lambda c: B.FirstKGate(c))
            calls["first_k"] = zero
        elif method == "random":
            rate = {c: min(1.0, helper_usage.get(c, c) / env.horizon) for c in budgets}
            evaluate("random", lambda c, rate=rate: B.RandomGate(rate[c], c, seed=cfg.seed))
            calls["random"] = zero
        elif method == "prm_threshold":
            if score is None or train_rows is None or "prm_score" not in train_rows.columns:
                skipped[method] = "needs a PRM (the helper names none) and scored training rows"
                continue
            per_episode_decisions = float(train_rows.group_by("episode_id").len()["len"].mean())
            thresholds = {c: B.calibrate_threshold(train_rows["prm_score"].to_numpy(), per_episode_decisions, c)
                          for c in budgets}
            evaluate(method, lambda c, t=thresholds: B.ScoreThresholdGate(score.score, t[c], c, name="prm_threshold"))
            calls[method] = offline_calls
        elif method == "router":
            if train_rows is None:
                skipped[method] = "needs training rows (--train-data, or a helper distilled from a solve folder)"
                continue
            model, names, train_success = _router(train_rows, cfg.seed)
            per_episode_decisions = float(train_rows.group_by("episode_id").len()["len"].mean())
            thresholds = {c: B.calibrate_threshold(train_success, per_episode_decisions, c) for c in budgets}

            def predicted_success(observation, model=model, names=names):
                return 1.0 - float(model.predict_proba(observation_features(observation, 0, np.nan, names))[0])

            evaluate(method, lambda c, t=thresholds, f=predicted_success: B.ScoreThresholdGate(f, t[c], c, name="router"))
            calls[method] = offline_calls
        elif method == "online_rl":
            from helper.online_rl import OnlineRLConfig, OnlineRLGate, train

            rl_cfg = OnlineRLConfig(iterations=cfg.rl_iterations, episodes_per_iteration=cfg.rl_episodes,
                                    max_budget=max(cfg.max_budget, 1), lr=cfg.rl_lr, seed=cfg.seed)
            rl_score = score if cfg.rl_use_prm else None
            policy, report = train(env, rl_cfg, rl_score)
            evaluate(method, lambda c, policy=policy, s=rl_score: OnlineRLGate(policy, c, s))
            calls[method] = report.calls | {"episodes": report.episodes}
        elif method == "oracle":
            # One counterfactual run (no intervention) gives every decision's gain in hindsight.
            _, _, records = evaluate_gate(env, lambda c: B.NeverGate(c), [0], "counterfactual", cfg.ci_resamples,
                                          counterfactual=True)
            flat = [r for episode in records[0] for r in episode]
            gains = ([r.episode_id for r in flat], [r.step for r in flat],
                     [r.cf_base_success for r in flat], [r.cf_intervene_success for r in flat])
            evaluate(method, lambda c, gains=gains: B.OracleGate.from_counterfactuals(*gains, budget=c))
            who = "human" if cfg.strong in ("human", "human-cli") else "strong"
            calls[method] = {"strong": 0, "human": 0} | {who: len(flat)}
        elif method == "exact_optimal":
            if cfg.env != "productqa":
                skipped[method] = (f"needs ProductQA's simulator (a model over question types); env={cfg.env!r} "
                                   "has no such model")
                continue
            if cfg.agent != "simulator" or cfg.memory_boost:
                skipped[method] = "needs the simulator agent with memory_boost 0 (known, memoryless dynamics)"
                continue
            model = B.simulator_model(env.type_sequences(), dict(zip(QUESTION_TYPES, cfg.sim_accuracy)),
                                      QUESTION_TYPES, env.horizon)
            evaluate(method, lambda c, model=model: B.exact_optimal_gate(model, QUESTION_TYPES, question_type, c))
            calls[method] = zero

    frame = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))
    frame.to_csv(out / "sweep.csv", index=False)
    pd.DataFrame(per_episode).to_csv(out / "episodes.csv", index=False)
    summary = summarize(frame, calls)
    summary["skipped"] = skipped
    summary["config"] = asdict(cfg)
    if helper is not None:
        summary["helper_stats"] = helper.stats()
    write_json_atomic(summary, out / "summary.json")
    save_sweep_plot(frame, out / "sweep.png", cfg.title)
    _print(summary, out)
    return summary


def _print(summary: dict, out: Path) -> None:
    print(f"{'method':>14s}  {'APGR':>6s}  {'CPT50':>6s}  {'CPT80':>6s}  calls")
    for method, entry in sorted(summary["methods"].items(), key=lambda kv: -(kv[1]["apgr"] or -9)):
        fmt = lambda v: "  none" if v is None else f"{v:6.3f}"
        print(f"{method:>14s}  {fmt(entry['apgr'])}  {fmt(entry['cpt50'])}  {fmt(entry['cpt80'])}  "
              f"{entry['training_calls']}")
    for method, reason in summary["skipped"].items():
        print(f"{method:>14s}  skipped: {reason}")
    print(f"sweep: wrote {out / 'sweep.csv'}, {out / 'summary.json'}, {out / 'sweep.png'}")
