"""The member the helper plays under each cap, chosen on the training folds (the last step of ``helpgate distill``).

    from helper.solve.select import select_members
    record = select_members("runs/demo/solve", "runs/demo/helper")     # writes helper/members/

The solved table is one way to spend a cap on the verifier's score; the threshold a user would set on the same
score is another, and which is better depends on the data (a table with thin cells, a score whose ranking is all it
has). So the helper does not assume: its family (``tabular_rl.choice.members.default_family``) holds the configured solve,
finer bins where the rows allow, every step pooled, stationary dynamics, the risk on a curve over step and score,
pessimism, and the threshold at 32 levels, and under each solved
cap C it plays the member with the best success on the training folds (or, within one standard error of it and not
below the best threshold, the smooth member: ``CrossFitted.chosen``), each member fitted without the fold it is
read on (``tabular_rl.choice.selection``: the logged episodes replayed where decisions are separate questions, the held-out
fold's own model elsewhere). The folds are whole task groups where there are five or more, else episodes
(``helper.gates.training_folds.fold_ids``), the rule the threshold baselines' levels are chosen by
(``helper.gates.threshold_levels``): on the training folds the helper is never below the best threshold under
its cap, by construction. No test row is read.

The chosen members are fitted again on every training row and written to ``<helper>/members/``:
``c{C}.npz`` (the table, ``tabular_rl.Solution``), ``c{C}.discretizer.json`` and ``selection.json`` (per cap the
member chosen, its cross-fitted success and spend, and every member's, so a reader sees the margin and what lost).
The cross-fitted figures rank the members; read through the judge they are no forecast of the success: on the rapids
the judge whose thin cells the training folds' per-step model fills read the solved tables 0.003-0.12 above their
success on fresh rivers and the thresholds up to 0.18 below (``benchmarks/setups/rapids_members.py``,
``judge_bias.py``); half of that model is now their smooth one, which roughly halves the lean
(``tabular_rl.choice.judge``), and what remains is what the chosen member's figure inherits.
``HelperGate.load(dir, budget=C)`` and ``gate.with_budget(C)`` play the member of C through the table backend.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from helper.gates.member_files import FOLDER, RECORD
from helper.gates.training_folds import fold_ids
from helper.solve import solve_files
from helper.solve.solve_command import own_rewards, parse_backoff
from tabular_rl.aligned import align, longest_if_they_differ
from tabular_rl.choice.members import MemberSpec, default_family, fit_member, threshold_specs
from tabular_rl.choice.selection import cross_fitted
from tabular_rl.transitions import Columns
from trajectories.files import write_json_atomic
from trajectories.shards import read_shard

FOLDS = 5


def member_files(budget: int) -> tuple[str, str]:
    """(policy, discretizer) paths of cap ``budget``'s member inside a helper folder."""
    return f"{FOLDER}/c{budget}.npz", f"{FOLDER}/c{budget}.discretizer.json"


def family_for(solved: dict, rows, budgets: list[int]) -> list[MemberSpec]:
    """The family of a solve folder's settings: its own solve first, then ``default_family``'s variants."""
    cols = Columns()
    horizon = int(rows[cols.step].max()) + 1
    decisions = float(rows.group_by(cols.episode).len()["len"].mean())
    bins, binning = int(solved.get("bins", 6)), str(solved.get("binning", "quantile"))
    buckets = int(solved.get("step_buckets", 0))
    own = MemberSpec("table", bins, binning, buckets, parse_backoff(solved.get("backoff", "auto")),
                     float(solved.get("pessimism", 0.0)))
    plain = solved.get("objective", "success") == "success" and not solved.get("shaping")
    variants = default_family(bins, binning, rows.height, horizon, decisions, max(budgets), buckets, pessimism=plain)
    family, seen = [own], {own.name}
    for spec in variants:
        if spec.name not in seen:
            family.append(spec)
            seen.add(spec.name)
    return family


def training_rows(source: Path) -> tuple[dict, object, int | None]:
    """A solve folder's settings, its training rows (labels dropped) with their steps on the solve's own time axis
    (``tabular_rl.aligned``), and the horizon they count back from (None: from the start)."""
    solved = json.loads((source / "solution.json").read_text()).get("config", {})
    rows = read_shard(source / "labels.parquet", require=("episode_id", "step", "prm_score"))
    rows = rows.drop([c for c in rows.columns if c.startswith("optimal_intervene")])
    to = longest_if_they_differ(rows) if solved.get("time_axis", "start") == "end" else None
    return solved, align(rows, to), to


def cross_fitted_family(rows, family: list[MemberSpec], budgets: list[int], folds: int = FOLDS, **settings):
    """``family`` read on the training folds distill deals (``fold_ids``): (the table, the per-row targets supervised
    bins need or None, what the folds are made of). ``settings`` go to ``cross_fitted``."""
    targets = own_rewards(rows, Columns()) if any(s.binning == "supervised" for s in family) else None
    ids, by = fold_ids(rows, folds)
    return cross_fitted(rows, ids, family, budgets, targets=targets, **settings), targets, by


def select_members(solve_folder: str | Path, helper_folder: str | Path, folds: int = FOLDS,
                   evaluator: str = "auto") -> dict | None:
    """Choose and write the member of every cap the solve folder solved (module docstring); the record written to
    ``selection.json``, or None for a priced solve (no cap to choose for)."""
    source, out = Path(solve_folder), Path(helper_folder)
    listed = solve_files.verify(source)
    if listed.get("advice_cost") is not None:
        return None
    budgets = sorted(int(b) for b in listed["budgets"] if int(b) > 0)
    if not budgets:
        return None
    solved, rows, to = training_rows(source)
    family = family_for(solved, rows, budgets)
    settings = dict(smoothing=float(solved.get("smoothing", 1.0)), objective=solved.get("objective", "success"),
                    shaping=float(solved.get("shaping", 0.0)))
    table, targets, by = cross_fitted_family(rows, family, budgets, folds, evaluator=evaluator, **settings)
    chosen, top = table.chosen(), table.best()
    thresholds = table.best(table.kind_indices("threshold"))
    (out / FOLDER).mkdir(parents=True, exist_ok=True)
    fitted: dict[str, object] = {}
    record = {"kind": "helpgate.helper.members", "folds_by": by, **table.to_dict(), "chosen": {}}
    for c in budgets:
        spec = family[chosen[c]]
        if spec.name not in fitted:
            fitted[spec.name] = fit_member(spec, rows, max(budgets), targets=targets, **settings)
            fitted[spec.name].discretizer.aligned_to = to
        member = fitted[spec.name]
        policy_file, discretizer_file = member_files(c)
        member.solution.save(out / policy_file)
        member.discretizer.save(out / discretizer_file)
        j = table.budgets.index(c)
        best_threshold = thresholds[c]
        record["chosen"][str(c)] = {
            "member": spec.to_dict(), "policy_file": policy_file, "discretizer_file": discretizer_file,
            "cross_fitted_success": _value(table.success[chosen[c], j]),
            "cross_fitted_interventions": _value(table.interventions[chosen[c], j]),
            "configured_solve_success": _value(table.success[0, j]),
            "best_on_folds": family[top[c]].name,
            "best_threshold": {"member": family[best_threshold].name,
                               "cross_fitted_success": _value(table.success[best_threshold, j]),
                               "cross_fitted_interventions": _value(table.interventions[best_threshold, j])}}
        if member.level is not None:
            record["chosen"][str(c)]["level"] = member.level
    write_json_atomic(record, out / FOLDER / RECORD)
    _print(record)
    return record


PRICED_SPREAD = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5)
"""Multiples of a target spend each priced table is set to on the training model, so that one of them spends close to
the target on folds it was not fitted on."""


def priced_tables(family: list[MemberSpec]) -> list[MemberSpec]:
    """The tables of a capped family the priced helper prices: not the pessimistic one (a bound on a gain has no price
    to trade against) nor the stationary one (what it estimates better is when to keep the cap for later, which at a
    spend with no cap matters least: the rapids leave a threshold at most 0.036 behind there; and each priced member
    costs a bisection of exact solves per fold)."""
    return [s for s in family if s.kind == "table" and not s.pessimism and s.dynamics == "steps"]


def priced_family(tables: list[MemberSpec], decisions: float, target: int) -> list[MemberSpec]:
    """The priced helper's family at target spend ``target``: each table priced on the training model to spend a few
    multiples of it (``PRICED_SPREAD``), and the threshold members for that spend."""
    return ([replace(s, kind="priced", spend=round(target * m, 6)) for s in tables for m in PRICED_SPREAD]
            + threshold_specs(decisions, target))


def priced_members(solve_folder: str | Path, targets: list[int], cap: int, folds: int = FOLDS,
                   evaluator: str = "auto") -> tuple[dict, dict]:
    """The priced helper at each target spend s (interventions an episode, no cap: ``cap`` is the horizon), chosen on
    the training folds like for like: among the family's tables priced on the training model to spend a few
    multiples of s (``PRICED_SPREAD``; ``tabular_rl.choice.members`` kind ``priced``) and the threshold members, the best
    cross-fitted success among those whose cross-fitted mean spend stays within s (``CrossFitted.best_within``), all
    read with no cap. Returns ``({target: fitted Member}, report)``."""
    source = Path(solve_folder)
    solved, rows, to = training_rows(source)
    cols = Columns()
    tables = priced_tables(family_for(solved, rows, targets))
    decisions = float(rows.group_by(cols.episode).len()["len"].mean())
    targets_of = sorted({int(t) for t in targets if int(t) > 0})
    own = own_rewards(rows, cols) if any(s.binning == "supervised" for s in tables) else None
    settings = dict(smoothing=float(solved.get("smoothing", 1.0)), objective=solved.get("objective", "success"),
                    shaping=float(solved.get("shaping", 0.0)))
    ids, by = fold_ids(rows, folds)
    chosen, report = {}, {"folds_by": by, "cap": int(cap), "targets": {}}
    for target in targets_of:
        family = priced_family(tables, decisions, target)
        table = cross_fitted(rows, ids, family, [int(cap)], evaluator=evaluator, targets=own, **settings)
        best = table.best_within(float(target), int(cap))
        chosen[target] = fit_member(family[best], rows, int(cap), targets=own, **settings)
        chosen[target].discretizer.aligned_to = to
        report["targets"][str(target)] = {
            "chosen": family[best].name, "evaluator": table.evaluator,
            "cross_fitted_success": _value(table.success[best, 0]),
            "cross_fitted_interventions": _value(table.interventions[best, 0]),
            "members": {f.name: [_value(table.success[i, 0]), _value(table.interventions[i, 0])]
                        for i, f in enumerate(family)}}
    return chosen, report


def _value(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 6)


def _print(record: dict) -> None:
    print(f"distill: the member each cap plays, chosen on {record['folds']} training folds by {record['folds_by']} "
          f"({record['evaluator']}, {record['episodes']} held-out episodes):")
    for c, entry in record["chosen"].items():
        best = entry["best_threshold"]
        fmt = lambda v: "n/a" if v is None else f"{v:.4f}"
        print(f"  C={c}: {entry['member']['name']} {fmt(entry['cross_fitted_success'])} "
              f"({fmt(entry['cross_fitted_interventions'])} int.); configured solve "
              f"{fmt(entry['configured_solve_success'])}; best threshold {best['member']} "
              f"{fmt(best['cross_fitted_success'])}"
              + ("" if entry.get("best_on_folds", entry["member"]["name"]) == entry["member"]["name"]
                 else f" (the folds' best, {entry['best_on_folds']}, within one standard error: the smooth member)"))
    if record["evaluator"] == "judge":
        print("  (figures that rank the members, not a forecast: a held-out fold read through a model leans towards the "
              "solved tables, up to 0.07 above their success on fresh episodes on the rapids; the sweep measures it)")
