"""``helpgate report``: the headline table of finished runs (win / tie / loss per set-up and baseline).

    helpgate report runs/sim-s0 runs/sim-s1 runs/sim-s2 chain=runs/chain --out report.md

Each ``RUN`` is a folder ``helpgate pipeline`` wrote (its ``sweep/``) or a ``helpgate sweep``
folder (``episodes.csv``, ``summary.json``). Runs that share a set-up name pool as seeds of one
set-up; the name is the sweep's environment (and base agent), or ``NAME=RUN`` names it. Runs of
one name whose sweeps differ in more than seeds and paths (``PER_SEED``) are refused, naming the
setting: another data root or ``decide_after`` is another set-up.

Per set-up, from the pooled ``episodes.csv`` (one row per method, budget and episode):

- success and interventions per method and budget: the mean over every episode of every seed;
- one hierarchical bootstrap (``helper.evaluation.metrics.hierarchical_weights``: seeds, then each episode's
  ``group`` within a seed, then episodes within a group; where every seed played the same groups, as
  fixed test groups, seeds and groups are drawn apart, ``seed_group_weights``), its draws shared by every
  method and budget (the pooled sweep frame's per-method intervals and the figure);
- per baseline, at each of ``--budgets`` (default C = 1 and 2): the helper's success minus the
  baseline's on the same episodes, with its 95% t interval over the clusters (``metrics.cluster_t_interval``:
  seeds and groups, its variance floored at the episodes' own; the bootstrap's percentile interval covered
  82-91% with 2-6 clusters, RESULTS);
- APGR of both with the share of [0, 1] their curve completes to always-intervene's point rather
  than measured, and CPT(50%) / CPT(80%), marked † where they fall in that completed part (the
  metrics of ``helper.evaluation.metrics.summarize`` on the pooled means);
- with ``--drop-incomplete``, a method and budget some seed did not play (a method its sweep skipped, a
  budget past its range) is left out and named under the table; without it such runs are refused;
- per baseline and budget, the interventions each used; every method at budget C plays under the cap C, each
  threshold-type baseline at the level chosen on its training folds for that cap (``helper.gates.threshold_levels``);
- at a spend (no cap), per threshold-type baseline and target s of ``--budgets``: the priced helper set to spend s
  minus the baseline's no-cap curve read at the priced helper's mean spend (``_at_priced_spend``,
  ``helper.evaluation.spend``);
- two verdicts (``metrics.verdict``), one per yardstick: a family per set-up and yardstick (under a cap: every
  baseline at every budget; at a spend: every no-cap curve at every target), Holm's rule over the p-values of its
  t intervals (``metrics.holm``, ``metrics.cluster_t_p``); ``win`` where some comparison of the baseline is rejected
  above 0 and none below, ``loss`` the reverse, ``mixed`` both, ``tie`` none; the families' sizes are the
  ``comparisons`` column (cap + spend). ``online_rl`` equal to ``first_k`` on every episode stands beside the family.

A ``RUN`` that holds ``join.json`` is an AGILE join (``benchmarks/agents/agile_join.py``): its rows go in a second
table, the helper against PPO's own advice per cost and against NoveltyGate and random at a budget
(``helper.evaluation.advice_join``); one name given to several join folders pools them as seeds.

Baselines are every method of the runs except the references (``never``, ``always``), the
upper bounds (``oracle``, ``exact_optimal``) and the helper. A run written before episodes had
a group resamples episodes alone (said under the table). Writes ``--out`` (Markdown: the table,
the reading notes, each run's provenance from ``provenance.json``) and beside it one figure per
set-up, ``<out stem>-<set-up>.png``: success against interventions used, one line per method.

``--headline SOURCE`` (``helper.evaluation.headline``) takes no RUN: the source (TOML) lists set-ups, each with its
committed report and its run folders; it rewrites a set-up's report from its runs where they are on disk, then writes
one table of every set-up (success and spend per baseline, the verdict, each set-up's commit, machine and command)
into the headline block of ``--out`` (``benchmarks/RESULTS.md``'s, from ``benchmarks/headline.toml``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import tyro

from helper import provenance
from helper.evaluation import metrics as M
from helper.evaluation.advice_join import is_join_folder, join_notes, join_rows
from helper.evaluation.metrics import verdict
from helper.evaluation.spend import FREE, PRICED
from helper.stored_config import renamed, same_setting

COST = "cost"
"""The episodes' column of a tiered sweep: what each episode's calls cost."""
NOT_BASELINES = (M.NEVER, M.ALWAYS, M.ORACLE, M.EXACT_OPTIMAL, M.HELPER, "counterfactual")
"""References, upper bounds and the helper itself: never compared as rivals."""
COMPLETED = "†"


@dataclass
class ReportConfig:
    runs: Annotated[list[str], tyro.conf.Positional, tyro.conf.arg(metavar="RUN")] = field(default_factory=list)
    """Finished run folders (a pipeline's --out or a sweep folder); NAME=RUN names the set-up."""
    out: str | None = None
    """Markdown file to write; the figures go beside it. Default: RUN/report.md for one run, ./report.md for several
    (and for --headline)."""
    budgets: list[int] = field(default_factory=lambda: [1, 2])
    """Budgets C at which the helper's success is compared with each baseline's."""
    resamples: int = 2000
    """Hierarchical bootstrap resamples."""
    level: float = 0.95
    """Confidence level of the intervals."""
    seed: int = 0
    """Seed of the bootstrap draws."""
    figures: bool = True
    """Draw one figure per set-up beside the table."""
    drop_incomplete: bool = False
    """Leave out a method and budget that some seed of its set-up did not play (a method its sweep skipped,
    a budget past another seed's range), each named under the table; without it such runs are refused."""
    headline: str | None = None
    """A headline source (TOML, ``helper.evaluation.headline``): instead of RUNs, one table of every set-up it lists,
    from their committed reports, with each set-up's commit, machine and command; into --out's headline block."""
    refresh: bool = True
    """With --headline: first rewrite a set-up's committed report from its runs where they are all on disk."""


@dataclass
class Run:
    path: Path
    sweep: Path
    setup: str
    episodes: pd.DataFrame
    grouped: bool
    """Whether episodes.csv has the group column (runs before it resample episodes alone)."""
    config: dict = field(default_factory=dict)
    """The sweep's config (summary.json)."""
    digest: str = ""
    """SHA-256 of its episodes.csv: the same run under another path (a copy) is the same run."""


def sweep_folder(path: Path) -> Path:
    """The sweep folder of a run: the run itself, or its ``sweep/``."""
    for folder in (path, path / "sweep"):
        if (folder / "episodes.csv").exists():
            return folder
    raise FileNotFoundError(f"{path}: no episodes.csv in it or in {path / 'sweep'}; is it a finished "
                            "helpgate pipeline or sweep folder?")


def setup_name(config: dict) -> str:
    """A set-up's default name: the environment (a plug-in's module), and the base agent."""
    env = str(config.get("env", "?"))
    short = env.split(":")[0].rsplit(".", 1)[-1]
    agent = str(config.get("agent", ""))
    if ":" in agent and not agent.startswith("openai:"):  # a plug-in agent: the env says it all
        return short
    return f"{short} ({Path(agent).name})" if agent else short


def load_run(spec: str) -> Run:
    name, _, path = spec.rpartition("=") if "=" in spec else ("", "", spec)
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"run {path}: not a folder")
    sweep = sweep_folder(path)
    digest = hashlib.sha256((sweep / "episodes.csv").read_bytes()).hexdigest()
    frame = pd.read_csv(sweep / "episodes.csv")
    missing = {"method", "budget", "episode_id", "success", "interventions"} - set(frame.columns)
    if missing:
        raise ValueError(f"{sweep / 'episodes.csv'}: lacks column(s) {sorted(missing)}")
    summary_path = sweep / "summary.json"
    config = json.loads(summary_path.read_text()).get("config", {}) if summary_path.exists() else {}
    config = renamed(config, "SweepConfig", summary_path)  # a sweep of an older release pools with a new one
    grouped = "group" in frame.columns
    if not grouped:
        frame["group"] = frame["episode_id"]
    frame["group"] = frame["group"].astype(str)
    return Run(path, sweep, name or setup_name(config), frame, grouped, config, digest)


PER_SEED = ("seed", "agent_seed", "strong_seed", "out", "helper", "train_data", "prm", "title", "device",
            "plugin_timeout_s")
"""Sweep settings that may differ between the seeds of one set-up (paths, seeds, where it ran)."""


def check_pooled(name: str, runs: list[Run], drop_incomplete: bool = False) -> None:
    """Refuse to pool runs whose sweeps differ in more than their seed: they are other set-ups. With
    ``drop_incomplete`` their method lists may differ too (what some seed did not play is left out, named)."""
    for k, one in enumerate(runs):  # the same run twice would count one seed as two
        for other in runs[k + 1:]:
            same = ("the same sweep folder" if one.sweep.resolve() == other.sweep.resolve() else
                    "identical episodes.csv (a copy)" if one.digest == other.digest else None)
            if same:
                raise ValueError(f"runs {one.path} and {other.path} are one run ({same}): pooled as seeds they would "
                                 "count it twice; give each run once.")
    first = runs[0]
    for other in runs[1:]:
        keys = (set(first.config) | set(other.config)) - set(PER_SEED) - ({"methods"} if drop_incomplete else set())
        differing = sorted(k for k in keys if not same_setting(k, first.config.get(k), other.config.get(k)))
        if differing:
            key = differing[0]
            raise ValueError(f"runs {first.path} and {other.path} share the set-up name {name!r} but their sweeps "
                             f"differ in {', '.join(differing)} ({key}: {first.config.get(key)!r} vs "
                             f"{other.config.get(key)!r}); name them apart with NAME=RUN.")


# -- one set-up ----------------------------------------------------------------------------------
@dataclass
class Pooled:
    """A set-up's runs as one table of per-episode outcomes and the bootstrap draws over it."""

    columns: list[tuple[str, int]]
    """(method, budget) of each column of ``success`` / ``interventions``."""
    success: np.ndarray
    interventions: np.ndarray
    weights: np.ndarray
    """Hierarchical bootstrap multiplicities (resamples, episodes), shared by every column."""
    levels: list = field(default_factory=list)
    """Per episode, its seed (run) and group: the clusters of ``metrics.cluster_t_interval``."""
    dropped: list[str] = field(default_factory=list)
    """Method and budget left out because a seed did not play them (``drop_incomplete``), with the seeds."""

    def index(self, method: str, budget: int) -> int | None:
        return self.columns.index((method, budget)) if (method, budget) in self.columns else None

    def frame(self, level: float) -> pd.DataFrame:
        """The pooled sweep (``sweep.csv`` columns): means and hierarchical intervals."""
        draws = M.weighted_means(self.success, self.weights)
        rows = []
        for k, (method, budget) in enumerate(self.columns):
            low, high = M.percentile_interval(draws[:, k], level)
            rows.append({"method": method, "budget": budget, "success": self.success[:, k].mean(),
                         "interventions": self.interventions[:, k].mean(), "episodes": len(self.success),
                         "ci_low": low, "ci_high": high})
        return pd.DataFrame(rows, columns=list(M.SWEEP_COLUMNS))


def pool(runs: list[Run], resamples: int, seed: int, drop_incomplete: bool = False) -> Pooled:
    frames = [run.episodes.assign(run=k) for k, run in enumerate(runs)]
    every = pd.concat(frames, ignore_index=True)
    every["budget"] = every["budget"].astype(int)
    keys = ["run", "episode_id"]
    units = every[keys + ["group"]].drop_duplicates(keys).reset_index(drop=True)
    tables = {}
    # With kinds of help (a tiered sweep) a budget is a cost, and what a method spends is its cost.
    spend = "cost" if COST in every.columns else "interventions"
    for value, column in (("success", "success"), ("interventions", spend)):
        wide = every.pivot_table(index=keys, columns=["method", "budget"], values=column, aggfunc="mean")
        tables[value] = wide.reindex(pd.MultiIndex.from_frame(units[keys]))
    gaps = tables["success"].isna()
    dropped = []
    if gaps.to_numpy().any():
        incomplete = gaps.any(axis=0).to_numpy().nonzero()[0]
        # A no-cap level past the ones every run plays extends one run's curve to its own priced spend
        # (helper.evaluation.spend.play_free): left out of the pooled curve and named, never a refusal.
        refused = [k for k in incomplete if not str(tables["success"].columns[k][0]).endswith(FREE)]
        if refused and not drop_incomplete:
            method, budget = tables["success"].columns[refused[0]]
            missing = units["run"][gaps.iloc[:, refused[0]].to_numpy()].iloc[0]
            raise ValueError(f"{runs[missing].path}: {method} at C={budget} did not play every episode the others "
                             "did; a paired comparison needs the same episodes and budgets for every method (runs "
                             "pooled as seeds need the same budgets, e.g. one --budgets; or rerun the sweep; or "
                             "--drop-incomplete to leave such a method and budget out, named under the table).")
        budgets_of: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        for column in incomplete:
            method, budget = tables["success"].columns[column]
            lacking = tuple(sorted({str(runs[k].path) for k in units["run"][gaps.iloc[:, column].to_numpy()]}))
            budgets_of.setdefault((str(method), lacking), []).append(int(budget))
        methods_of: dict[tuple[tuple[int, ...], tuple[str, ...]], list[str]] = {}
        for (method, lacking), budgets in budgets_of.items():
            methods_of.setdefault((tuple(budgets), lacking), []).append(method)
        for (budgets, lacking), methods in methods_of.items():
            dropped.append(f"{', '.join(methods)} at C={', '.join(map(str, budgets))} "
                           f"(not played by {', '.join(lacking)})")
        tables = {value: table.drop(columns=table.columns[incomplete]) for value, table in tables.items()}
    weights = M.seed_group_weights([units["run"].tolist(), units["group"].tolist()], resamples, seed)
    columns = [(str(m), int(b)) for m, b in tables["success"].columns]
    return Pooled(columns, tables["success"].to_numpy(float), tables["interventions"].to_numpy(float), weights,
                  dropped=dropped, levels=[units["run"].tolist(), units["group"].tolist()])


def _cpt(entry: dict, key: str) -> str:
    value = entry.get(key)
    if value is None:
        return "none"
    measured_to = 1.0 - (entry.get("apgr_extrapolated_share") or 0.0)
    return f"{value:.2f}" + (COMPLETED if value > measured_to + 1e-12 else "")


def _apgr(entry: dict) -> str:
    value = entry.get("apgr")
    return "none" if value is None else f"{value:.3f} ({100 * (entry.get('apgr_extrapolated_share') or 0):.0f}%)"


def setup_rows(name: str, runs: list[Run], cfg: ReportConfig) -> tuple[list[dict], pd.DataFrame, list[str]]:
    """The table rows of one set-up (one per baseline), its pooled sweep frame and what was left out of it."""
    pooled = pool(runs, cfg.resamples, cfg.seed, cfg.drop_incomplete)
    frame = pooled.frame(cfg.level)
    summary = M.summarize(frame)["methods"]
    if M.HELPER not in summary:
        raise ValueError(f"set-up {name!r}: the runs have no helper rows ({[str(r.path) for r in runs]})")
    unplayed = [c for c in cfg.budgets if pooled.index(M.HELPER, c) is None]
    if unplayed:  # a whole column of dashes otherwise
        raise ValueError(f"--budgets {' '.join(map(str, unplayed))}: set-up {name!r}'s helper played no such budget "
                         "(its sweeps did not); give --budgets among the budgets of their sweep.csv.")
    spend = pooled.interventions.mean(axis=0)
    rows = []
    # Two families per set-up, each with Holm's rule: under a cap (every baseline at every budget) and at a spend
    # (the priced helper against every no-cap curve at every target); (row, interval, p-value) of each comparison.
    capped, at_spend = [], []
    others = sorted(set(summary) - set(NOT_BASELINES) - {PRICED} - {m for m in summary if m.endswith(FREE)})
    for baseline in others:
        cells, used, spent_cells, tested, tested_spend = {}, {}, {}, [], []
        alias = same_as(pooled, baseline)
        for budget in cfg.budgets:
            spent_cells[budget], reading = _at_priced_spend(pooled, baseline, budget, cfg.level)
            if reading is not None:
                tested_spend.append(reading)
            mine, theirs = pooled.index(M.HELPER, budget), pooled.index(baseline, budget)
            if mine is None or theirs is None:
                cells[budget] = used[budget] = "–"
                continue
            paired = pooled.success[:, mine] - pooled.success[:, theirs]
            diff = paired.mean()
            low, high = M.cluster_t_interval(paired, pooled.levels, cfg.level)
            tested.append(((low, high), M.cluster_t_p(paired, pooled.levels)))
            cells[budget] = f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]"
            used[budget] = f"{spend[mine]:.2f} / {spend[theirs]:.2f}"
        helper, other = summary[M.HELPER], summary[baseline]
        apart = VARIANTS.get(baseline) or (f"= {alias} on every episode" if alias else None)
        row = {"set-up": name, "seeds": len(runs), "episodes": len(pooled.success), "comparisons": "",
               "baseline": f"{baseline} ({apart})" if apart else baseline,
               **{f"C={c}": cells[c] for c in cfg.budgets},
               **{f"interventions C={c} helper / baseline": used[c] for c in cfg.budgets},
               **{f"s={c} priced helper at its spend": spent_cells[c] for c in cfg.budgets},
               "APGR helper / baseline (completed)": f"{_apgr(helper)} / {_apgr(other)}",
               "CPT(50%) helper / baseline": f"{_cpt(helper, 'cpt50')} / {_cpt(other, 'cpt50')}",
               "CPT(80%) helper / baseline": f"{_cpt(helper, 'cpt80')} / {_cpt(other, 'cpt80')}",
               "verdict under a cap": "–", "verdict at a spend": "–", "certified": certified(runs)}
        rows.append(row)
        if apart:  # a duplicate of another baseline: beside the families, not in them
            row["verdict under a cap"] = "not in the family" if tested else "–"
        else:
            capped += [(row, interval, p) for interval, p in tested]
            at_spend += [(row, interval, p) for interval, p in tested_spend]
    for family, column in ((capped, "verdict under a cap"), (at_spend, "verdict at a spend")):
        # A baseline's verdict reads only the comparisons its family's rule rejects.
        flags = M.holm([p for _, _, p in family], 1 - cfg.level)
        for row in rows:
            mine = [(interval, flag) for (owner, interval, _), flag in zip(family, flags) if owner is row]
            if mine:
                row[column] = verdict([i for i, _ in mine], [f for _, f in mine])
    for row in rows:
        row["comparisons"] = f"{len(capped)} + {len(at_spend)}"
    return rows, frame, pooled.dropped


def certified(runs: list[Run]) -> str:
    """The set-up's guarantees (``helpgate calibrate``'s ``guarantee.json`` in each run's helper folder): per seed
    that has one, the target success and confidence, the calibration episodes n, the cheapest certified budget and
    its calibration spend per episode, marked where it was certified on the fallback classifier (no PRM); a
    guarantee of other helper files (re-distilled since) or one that cannot be read is named as such, with a
    warning; "–" where no run has one."""
    import warnings

    from helper.gates.certify import GUARANTEE_FILE, helper_fingerprint, read_guarantee

    cells = []
    for one in runs:
        folder = run_helper(one)
        try:
            record = read_guarantee(folder) if folder else None
        except (ValueError, OSError) as error:
            warnings.warn(f"{error} The report shows no guarantee for {one.path}.", stacklevel=2)
            cells.append(f"unreadable {GUARANTEE_FILE}")
            continue
        if not record:
            continue
        if record.get("helper_fingerprint") != helper_fingerprint(folder):
            warnings.warn(f"{folder / GUARANTEE_FILE} was calibrated on other helper files (helper_fingerprint "
                          "differs: re-distilled since); the report does not show it. Re-run `helpgate calibrate`.",
                          stacklevel=2)
            cells.append("stale (helper re-distilled since)")
            continue
        member = record["member"]
        on_fallback = ", on the fallback (no PRM)" if record.get("fallback") else ""
        cells.append(f"{record['target']:.2f} at {1 - record['delta']:.0%}, n {record['n']}: C={member['budget']}, "
                     f"{member['interventions']:.2f}/ep{on_fallback}")
    return "; ".join(cells) or "–"


def run_helper(one: Run) -> Path | None:
    """The helper folder of the run the report was given: the sweep's recorded helper found from the run's own
    folder (as recorded relative to the sweep, so a copied run reads its copy), else its pipeline's ``helper/``,
    else the recorded absolute path (a sweep of a helper that lies elsewhere)."""
    recorded, out = one.config.get("helper"), one.config.get("out")
    candidates = []
    if recorded and out:
        candidates.append(one.sweep / os.path.relpath(Path(recorded), Path(out)))
    candidates += [one.path / "helper", one.sweep.parent / "helper"] + ([Path(recorded)] if recorded else [])
    return next((c.resolve() for c in candidates if c.is_dir()), None)


def prm_folds_fell_back(run: Run) -> str | None:
    """The PRM's ``metrics.json`` ``folds.by`` where its folds fell back to episodes (``prm.data.folds.FELL_BACK``),
    for a pipeline folder's ``prm/`` or the PRM the sweep names; None otherwise."""
    from prm.data.folds import FELL_BACK

    for folder in (run.path / "prm", Path(str(run.config.get("prm") or "")) if run.config.get("prm") else None):
        path = folder / "metrics.json" if folder else None
        if path is not None and path.is_file():
            by = str((json.loads(path.read_text()).get("folds") or {}).get("by", ""))
            return by if FELL_BACK in by else None
    return None


VARIANTS: dict[str, str] = {}
"""Methods that are the helper itself in another form: shown beside the baselines, never in a verdict's family (the
priced helper is the at-a-spend side of every comparison, not a baseline)."""


def same_as(pooled: Pooled, method: str) -> str | None:
    """Another baseline whose outcomes and interventions equal ``method``'s on every episode at every budget both
    played (``online_rl`` that learned to intervene first, as ``first_k``), else None: one result, not two."""
    if method != "online_rl":
        return None
    for other in ("first_k",):
        pairs = [(pooled.index(method, c), pooled.index(other, c)) for m, c in pooled.columns if m == method]
        pairs = [(a, b) for a, b in pairs if b is not None]
        if pairs and all(np.array_equal(pooled.success[:, a], pooled.success[:, b])
                         and np.array_equal(pooled.interventions[:, a], pooled.interventions[:, b]) for a, b in pairs):
            return other
    return None


def _at_priced_spend(pooled: Pooled, baseline: str, target: int, level: float) -> tuple[str, tuple | None]:
    """The priced helper set to spend ``target`` minus ``baseline``'s no-cap curve read at the priced helper's mean
    spend (``metrics.spend_matched_mix`` on the curve, never's C = 0 its zero point; per episode, so paired): the
    cell and ``(interval, p-value)``, or a cell saying why there is no reading and None."""
    priced = pooled.index(PRICED, target)
    points = [c for m, c in pooled.columns if m == baseline + FREE]
    if priced is None or not points:
        return "–", None
    goal = pooled.interventions[:, priced].mean()
    curve = {c: pooled.interventions[:, pooled.index(baseline + FREE, c)].mean() for c in points}
    columns = {c: pooled.index(baseline + FREE, c) for c in points}
    if pooled.index(M.NEVER, 0) is not None:
        curve[0], columns[0] = 0.0, pooled.index(M.NEVER, 0)
    mix = M.spend_matched_mix(curve, goal)
    if mix is None:
        return f"out of reach (priced {goal:.2f}/ep, curve ≤ {max(curve.values()):.2f})", None
    at = sum(w * pooled.success[:, columns[c]] for c, w in mix.items())
    paired = pooled.success[:, priced] - at
    low, high = M.cluster_t_interval(paired, pooled.levels, level)
    mixed = " + ".join(f"{w:.2f}·s={c}" for c, w in mix.items())
    return (f"{paired.mean():+.3f} [{low:+.3f}, {high:+.3f}] ({goal:.2f}/ep; {mixed})",
            ((low, high), M.cluster_t_p(paired, pooled.levels)))


def markdown_table(rows: list[dict], once: tuple[str, ...] = ("set-up", "seeds", "episodes", "comparisons",
                                                            "certified")) -> str:
    """Rows as Markdown, the columns ``once`` (the set-up's name, seeds, episodes) written once per set-up."""
    if not rows:
        return "(no baseline to compare)"
    header = list(rows[0])
    repeated = [i for i, h in enumerate(header) if h in once]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    last = None
    for row in rows:
        cells = [str(row[h]) for h in header]
        if row["set-up"] == last:  # one block per set-up: its name, seeds and episodes once
            for i in repeated:
                cells[i] = ""
        last = row["set-up"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def provenance_lines(run: Run) -> list[str]:
    """One run's provenance: command, commit, machine, start and wall time of each stage."""
    stages = {**provenance.read(run.path)["stages"], **provenance.read(run.sweep)["stages"]}
    if not stages:
        return [f"- `{run.path}`: no provenance.json (written before runs recorded it)"]
    stages = dict(sorted(stages.items(), key=lambda item: str(item[1].get("started"))))  # in the order they ran
    first = next(iter(stages.values()))
    main = stages.get("pipeline") or stages.get("sweep") or first
    commit = main.get("commit") or {}
    machine = main.get("machine") or {}
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    described = commit.get("describe") or commit.get("hash") or commit.get("version")
    dirty = " (dirty)" if commit.get("dirty") and not str(described).endswith("-dirty") else ""
    times = ", ".join(f"{stage} {entry.get('seconds', float('nan')):.1f} s" for stage, entry in stages.items())
    return [f"- `{run.path}` ({run.setup}): `{' '.join(main.get('command') or [])}`",
            f"  commit {described}{dirty}; "
            f"{machine.get('cpu')} ({machine.get('usable_cores')} of {machine.get('cores')} cores), {gpus}; "
            f"started {first.get('started')}",
            f"  wall time: {times}"]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "setup"


def run(cfg: ReportConfig) -> str:
    if cfg.headline is not None:
        return run_headline(cfg)
    if not cfg.runs:
        raise ValueError("runs: name at least one finished run folder (or an AGILE join folder with join.json)")
    if not cfg.budgets or min(cfg.budgets) < 0:
        raise ValueError(f"budgets={cfg.budgets}: give one or more budgets >= 0")
    if cfg.resamples < 1:
        raise ValueError(f"resamples={cfg.resamples}: draw at least one resample")
    if not 0 < cfg.level < 1:
        raise ValueError(f"level={cfg.level}: a confidence level lies strictly between 0 and 1")
    joins, sweeps = {}, []
    for spec in cfg.runs:
        name, _, path = spec.rpartition("=")
        if is_join_folder(Path(path)):
            joins.setdefault(name or Path(path).name, []).append(Path(path))
        else:
            sweeps.append(spec)
    runs = [load_run(spec) for spec in sweeps]
    setups: dict[str, list[Run]] = {}
    for one in runs:
        setups.setdefault(one.setup, []).append(one)
    out = Path(cfg.out) if cfg.out else (runs[0].path / "report.md" if len(runs) == 1 and not joins
                                         else Path("report.md"))
    out.parent.mkdir(parents=True, exist_ok=True)
    rows, figures, dropped = [], [], []
    for name, members in setups.items():
        check_pooled(name, members, cfg.drop_incomplete)
    for name, members in setups.items():
        these, frame, left_out = setup_rows(name, members, cfg)
        rows += these
        dropped += [f"{name}: {item}" for item in left_out]
        if cfg.figures:
            from helper.evaluation.plots import save_sweep_plot

            path = out.with_name(f"{out.stem}-{_slug(name)}.png")
            save_sweep_plot(frame, path, f"{name}: {len(members)} seed(s), pooled")
            figures.append(path.name)
    level = f"{100 * cfg.level:g}%"
    notes = [
        f"Cells C=c: the helper's success minus the baseline's at budget c on the same episodes, pooled over "
        f"the set-up's seeds, [{level} t interval over the clusters: the per-episode differences' group means "
        "(seeds, then groups) with K - 1 degrees of freedom, or where every seed played the same groups a seeds x "
        "groups layout with Satterthwaite's degrees; its variance at least the episodes' own variance of the mean, as "
        "a few cluster means can agree by chance; a percentile bootstrap covers below its level with so few "
        "clusters]. Two verdicts, one per yardstick, each over its own family (sizes under 'comparisons': cap + "
        f"spend) by Holm's rule at {100 * (1 - cfg.level):g}% over those intervals' p-values; win where some "
        "comparison of the baseline is rejected above 0 and none below, loss the reverse, mixed both, tie where none "
        "is rejected; the intervals beside it are per comparison, not adjusted. A baseline equal to another on every "
        "episode (online_rl that ends as first_k) is shown beside the families, not in them.",
        "Under a cap (C=c, interventions C=c): every method plays at most c interventions an episode, each threshold "
        "baseline at the level its training folds chose for the best success under c (a level that leaves the cap "
        "unspent is not at full strength), the helper at the member its training folds chose for c.",
        "At a spend (s=c): no cap; the priced helper set to spend c interventions an episode on its training rows, "
        "minus the baseline's no-cap curve (levels set to spend 1, 2, ... an episode: every run 1 to the largest "
        "budget + 1, then on until the curve reaches past its priced helper; never as its zero point) read at the "
        "priced helper's mean spend: the two levels "
        "whose mean spends bracket it, mixed as a gate playing the larger on that share of episodes (per episode, so "
        "still paired, with the same t interval; the weights are the pooled means', taken as known); "
        "'out of reach' where a curve stops short (levels some seed did not play are left out).",
        f"APGR (the share of [0, 1] completed to always-intervene's point, not measured); CPT as a share of "
        f"always-intervene's interventions, {COMPLETED} where it falls in the completed part.",
    ]
    tiered = [str(r.path) for r in runs if COST in r.episodes.columns]
    if tiered:
        notes.append("Several kinds of help, each at its price (a tiered sweep, helper.evaluation.tiered_sweep): C is a "
                     "cost budget per episode in the unit of the prices and the columns 'interventions' are the mean "
                     "cost; the baselines are one helper per kind, a cascade and a random kind, each under the same "
                     "budget: " + ", ".join(tiered) + ".")
    fell_back = [f"{r.path} ({by})" for r in runs if (by := prm_folds_fell_back(r))]
    if fell_back:
        notes.append("PRM folds fell back to episodes (fewer task groups than folds: its out-of-fold scores were not "
                     "made on held-out groups): " + "; ".join(fell_back) + ".")
    ungrouped = [str(r.path) for r in runs if not r.grouped]
    if ungrouped:
        notes.append(f"No group column (runs before it was recorded), episodes resampled without groups: "
                     f"{', '.join(ungrouped)}.")
    if dropped:
        notes.append("Left out, not played on every seed's episodes (a no-cap level past those every run plays, or "
                     "with --drop-incomplete): " + "; ".join(dropped) + ".")
    if figures:
        notes.append("Figures: " + ", ".join(figures) + " (success against interventions used, one line per method).")
    lines = [markdown_table(rows), "", *notes, ""] if rows or not joins else []
    if joins:
        agile = [row for name, members in joins.items() for row in join_rows(name, members, cfg.resamples, cfg.seed,
                                                                                cfg.level)]
        lines += [markdown_table(agile, once=("set-up",)), "", *join_notes(joins, cfg.resamples, cfg.level), ""]
    lines += ["Provenance:", ""]
    for one in runs:
        lines += provenance_lines(one)
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    print(text, end="")
    print(f"report: wrote {out}")
    return text


def run_headline(cfg: ReportConfig) -> str:
    """``--headline SOURCE``: the headline block of every set-up the source lists, into ``--out``."""
    from helper.evaluation.headline import write

    if cfg.runs:
        raise ValueError(f"runs {cfg.runs}: give RUN folders or --headline, not both (the source lists the runs)")
    text = headline_block(Path(cfg.headline), cfg.refresh, cfg.resamples, cfg.seed, cfg.level)
    said = write(text, Path(cfg.out or "report.md"))
    print(text, end="")
    print(f"report: {said}")
    return text


def headline_block(source: Path, refresh: bool = True, resamples: int = 2000, seed: int = 0,
                   level: float = 0.95) -> str:
    """The headline block of a source (``helper.evaluation.headline``), each set-up's report first rewritten from its
    runs where they are on disk and ``refresh``."""
    from helper.evaluation.headline import headline_text

    def rewrite(setup) -> None:
        run(ReportConfig(runs=[f"{setup.name}={one}" for one in setup.runs], out=setup.report.as_posix(),
                         budgets=list(setup.budgets), resamples=resamples, level=level, seed=seed, figures=False,
                         drop_incomplete=setup.drop_incomplete))

    return headline_text(source, markdown_table, rewrite if refresh else None)
