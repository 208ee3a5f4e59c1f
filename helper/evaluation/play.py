"""``helpgate evaluate``: play held-out episodes online with one helper at several budgets.

    helpgate evaluate --helper runs/demo/helper --budgets 0 1 2 3 --out runs/demo/evaluate

Evaluating a method is always the same two steps (``evaluate_gate``): build its gate for budget
C, then ``agile.rollout.run_episodes`` on fresh copies of the held-out episodes with that gate
and ``budget=C``. Per budget it records mean success, mean interventions per episode and a 95%
bootstrap interval of the success that resamples groups, then episodes within a group
(``helper.evaluation.metrics.grouped_ci``; episodes alone where every episode is its own group).
``helpgate sweep`` runs every baseline through the same function.

Writes ``out/evaluate.csv`` (the ``sweep.csv`` columns) and ``out/episodes.csv`` (one row per
method, budget and episode: its group, success and interventions). An episode's ``group``
(``episode_group``) is the unit a hierarchical bootstrap resamples above the episodes: the
episode's own ``group`` attribute when it has a string one (the AGILE executor's ProductQA
group; a plug-in env may set it), else its first decision's ``task_id`` up to the first ``/``
(ProductQA's ``group/question``; TextWorld's game; a plug-in's task).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from agile.rollout import run_episodes
from helper.data.environment import EnvConfig, Environment
from helper.evaluation.metrics import NIL_GAIN, grouped_ci, sweep_columns
from trajectories.outputs import not_another_run, out_folder


@dataclass
class EvaluateConfig(EnvConfig):
    helper: str = "runs/default/helper"
    """Helper folder written by `helpgate distill`."""
    budgets: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    """Intervention budgets C per episode to evaluate at."""
    backend: str | None = None
    """Override the helper's backend (features, text, or table: the solved table itself)."""
    prm: str | None = None
    """Score with this PRM folder instead of the one the helper names."""
    ci_resamples: int = 2000
    """Bootstrap resamples of each 95 percent confidence interval."""
    out: str = "runs/default/evaluate"
    """Folder for evaluate.csv and episodes.csv."""


def evaluate_gate(env: Environment, gate_for_budget: Callable[[int], object], budgets: Sequence[int],
                  method: str, ci_resamples: int = 2000, counterfactual: bool = False, cap: int | None = None,
                  helps=None):
    """``(rows, episode_rows, records)``: one sweep row per budget, one row per episode, raw records. ``cap``: the
    episode's budget for every run instead of each of ``budgets`` (a method set to a spend, with no cap, keys its
    rows by that spend). ``helps``: several kinds of help in place of the strong actor (``agile.helps.Help``), the
    budget then a cost per episode; each row and episode row adds ``cost`` and, per kind, ``calls_<kind>``."""
    rows, per_episode, all_records = [], [], {}
    for budget in budgets:
        started = time.perf_counter()
        episodes = env.episodes()
        gate = gate_for_budget(int(budget))
        # The held-out seed keys the agent's per-decision seeds: the same draws for every method and budget.
        records = run_episodes(episodes, env.base, None if helps else env.strong, gate=gate,
                               budget=int(budget if cap is None else cap), counterfactual=counterfactual,
                               rng_seed=int(getattr(getattr(env, "cfg", None), "seed", 0)), helps=helps)
        # The next budget replays these episode ids: a gate keeping per-episode counts forgets them
        # explicitly (run_episodes ends finished episodes; this also covers any it left unfinished).
        if hasattr(gate, "end_episode"):
            for episode in episodes:
                gate.end_episode(episode.episode_id)
        success = [float(episode.success()) for episode in episodes]
        used = [sum(r.intervened for r in episode_records) for episode_records in records]
        groups = [episode_group(e, r) for e, r in zip(episodes, records)]
        low, high = grouped_ci(success, groups, resamples=ci_resamples, seed=int(budget))
        rows.append({"method": method, "budget": int(budget), "success": float(sum(success) / len(success)),
                     "interventions": float(sum(used) / len(used)), "episodes": len(episodes),
                     "ci_low": low, "ci_high": high})
        # An env that knows its dynamics counts the interventions that could not gain anything.
        nil = [getattr(episode, NIL_GAIN, None) for episode in episodes]
        if episodes and all(n is not None for n in nil):
            rows[-1][NIL_GAIN] = float(sum(nil) / len(nil))
        per_episode += [{"method": method, "budget": int(budget), "episode_id": e.episode_id,
                         "group": g, "success": s, "interventions": u}
                        for e, g, s, u in zip(episodes, groups, success, used)]
        if helps:
            spent = _spent(records, [h.name for h in helps])
            rows[-1] |= {key: float(sum(v) / len(v)) for key, v in spent.items()}
            for i, row in enumerate(per_episode[-len(episodes):]):
                row |= {key: v[i] for key, v in spent.items()}
        all_records[int(budget)] = records
        print(f"{method:>14s}  C={budget:<2d} success {rows[-1]['success']:.3f} [{low:.3f}, {high:.3f}]  "
              f"interventions {rows[-1]['interventions']:.2f}"
              + (f" (nil gain {rows[-1][NIL_GAIN]:.2f})" if NIL_GAIN in rows[-1] else "")
              + (f"  cost {rows[-1]['cost']:.2f}" if helps else "")
              + f"  ({time.perf_counter() - started:.1f}s)")
    return rows, per_episode, all_records


def _spent(records, kinds: list[str]) -> dict[str, list[float]]:
    """Per episode: ``cost`` (what its calls cost) and ``calls_<kind>`` for each kind."""
    out = {"cost": [float(sum(r.help_cost or 0.0 for r in rs)) for rs in records]}
    for kind in kinds:
        out[f"calls_{kind}"] = [float(sum(r.help_kind == kind for r in rs)) for rs in records]
    return out


def episode_group(episode, records) -> str:
    """The group an episode belongs to (see the module docstring)."""
    own = getattr(episode, "group", None)
    if isinstance(own, str):
        return own
    task = records[0].task_id if records else episode.episode_id
    return str(task).split("/", 1)[0]


def load_helper(cfg: EvaluateConfig | object, backend: str | None = None):
    from helper.gates.helper_gate import HelperGate

    prm = getattr(cfg, "prm", None)
    return HelperGate.load(cfg.helper, backend=backend, prm=prm if prm else True, device=cfg.spec.device)


def run(cfg: EvaluateConfig) -> pd.DataFrame:
    not_another_run(out_folder(cfg.out, "runs/demo/evaluate"), "evaluation")  # not '', nor a helper's folder
    if not cfg.budgets:  # no budget: no row, and empty tables that read as a finished evaluation
        raise ValueError("budgets=[]: give one or more budgets C to evaluate at, e.g. --budgets 0 1 2 3")
    env = Environment(cfg)
    helper = load_helper(cfg, cfg.backend)
    rows, per_episode, _ = evaluate_gate(env, helper.with_budget, cfg.budgets, "helper", cfg.ci_resamples)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows, columns=sweep_columns(rows))
    frame.to_csv(out / "evaluate.csv", index=False)
    pd.DataFrame(per_episode).to_csv(out / "episodes.csv", index=False)
    print(f"evaluate: wrote {out / 'evaluate.csv'}; helper stats {helper.stats()}")
    return frame
