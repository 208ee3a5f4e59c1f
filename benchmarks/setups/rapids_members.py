"""How well the training folds choose the helper's member on the rapids: every member's cross-fitted figure against
its true success, in expectation over the slips on fresh rivers.

    python benchmarks/setups/rapids_members.py runs/rapids/seed0 runs/rapids/seed2 --rivers 500 \\
        --save benchmarks/data/rapids-members
    python benchmarks/setups/rapids_members.py --from benchmarks/data/rapids-members/seed0 \\
        benchmarks/data/rapids-members/seed2

``helpgate distill`` plays, under each cap C, the member of its family with the best success on the training folds
(``helper.solve.select``). Here each member of a finished run's family is fitted on the run's training rows as distill
fits the chosen one, and played on ``--rivers`` fresh rivers scored by the run's own verifier, each river counting
its exact success probability (the slips taken out of the draw: ``examples.plain_cue_optimum.expected_outcome``).
Beside it, the member's cross-fitted figure from ``selection.json``. So a reader sees what the folds' choice costs
(regret: the best member's true success minus the chosen one's) and whether the judge reads some members
systematically high (bias: cross-fitted minus true, per member); and the verifier's ceiling (``ceiling``: the best
any gate reading this score reaches on these rivers, an oracle) between the members and the exact optimum, so the
gap splits into what the verifier leaves, what 64 episodes' estimate loses, and what the choice loses.

``--current-family`` reads the family this commit's distill would build instead (a member added since the run has no
cross-fitted figure and is never the chosen one, but its truth is printed).

``--rechoose`` reads the cross-fitted table again from the kept training rows (the folds distill deals,
``helper.gates.training_folds.fold_ids``) and takes the member this commit's rule chooses
(``tabular_rl.choice.selection.CrossFitted.chosen``) instead of the one the run played.

``--save DIR`` keeps per run what the table is recomputed from (``DIR/<run name>/``): the training rows the members
are fitted on (``labels.parquet``), the fresh rivers' scores and slip probabilities (``rivers.parquet``), the family
(``family.json``) and the run's ``selection.json``; ``--from`` reads those alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from examples.rapids_optimum import optimum, played_in_expectation  # noqa: E402
from helper.solve.solve_command import own_rewards  # noqa: E402
from tabular_rl.choice.members import MemberSpec, fit_member  # noqa: E402
from tabular_rl.transitions import Columns  # noqa: E402

LABEL_COLUMNS = ("episode_id", "step", "intervened", "budget_left", "reward", "done", "success", "prm_score")


def score_rivers(run: Path, rivers: int) -> pl.DataFrame:
    """``rivers`` fresh rivers of the run's held-out environment, each state scored once by the run's verifier."""
    from benchmarks.setups.rapids import held_out_walk
    from examples.plain_cue_optimum import SLIP

    _, env, helper, walked = held_out_walk(run, rivers)
    scores = helper.scorer.scores
    rows = [{"river": i, "step": t, "prm_score": float(scores[(steps[0].episode_id, t)]), "slip": SLIP[risk]}
            for i, (steps, episode) in enumerate(zip(walked, env.episodes())) for t, risk in enumerate(episode.risks)]
    return pl.DataFrame(rows)


def gather(run: Path, rivers: int) -> dict:
    """What the table reads, from a finished run folder."""
    from helper.solve.select import family_for
    from trajectories.shards import read_shard

    labels = read_shard(run / "solve" / "labels.parquet").select(LABEL_COLUMNS)
    selection = json.loads((run / "helper" / "members" / "selection.json").read_text())
    solved = json.loads((run / "solve" / "solution.json").read_text()).get("config", {})
    listed = set(selection["members"])  # the family as distill built it (a run of an older family has fewer)
    family = [spec for spec in family_for(solved, labels, selection["budgets"]) if spec.name in listed]
    return {"labels": labels, "rivers": score_rivers(run, rivers), "selection": selection,
            "family": [spec.to_dict() for spec in family]}


def save(kept: dict, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    kept["labels"].write_parquet(folder / "labels.parquet")
    kept["rivers"].write_parquet(folder / "rivers.parquet")
    (folder / "family.json").write_text(json.dumps(kept["family"], indent=1) + "\n")
    (folder / "selection.json").write_text(json.dumps(kept["selection"], indent=1) + "\n")


def load(folder: Path) -> dict:
    return {"labels": pl.read_parquet(folder / "labels.parquet"), "rivers": pl.read_parquet(folder / "rivers.parquet"),
            "family": json.loads((folder / "family.json").read_text()),
            "selection": json.loads((folder / "selection.json").read_text())}


CEILING_BINS = 12
"""Score bins per step of the ceiling's policy."""


def ceiling(scores: np.ndarray, slip: np.ndarray, budget: int) -> float:
    """The best a gate reading this verifier's score (and the step and budget left) reaches on these rivers: a
    per-step table of ``CEILING_BINS`` score bins whose slip rates and next states are read off the rivers themselves
    (their true slip probabilities), solved exactly. An oracle: it reads the test rivers' risks, so it bounds what the
    verifier allows, it is not a method."""
    edges = np.quantile(scores, np.linspace(0, 1, CEILING_BINS + 1)[1:-1])
    state = np.searchsorted(edges, scores, side="right")
    risk, occupancy = river_risk(state, slip, CEILING_BINS)
    solution = solve_per_step(risk, occupancy, budget)

    def decide(step, score, left):
        return solution.intervene_prob(step, np.searchsorted(edges, score, side="right"), left) > 0.5

    return played_in_expectation(decide, scores, slip, budget)


def river_risk(state: np.ndarray, slip: np.ndarray, n_states: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step and state (``state``: rivers x steps), the rivers' mean slip probability and the share of rivers
    there: a gate's risk and next states in truth, read off the rivers."""
    risk, occupancy = [], []
    for t in range(state.shape[1]):
        seen = np.bincount(state[:, t], minlength=n_states)
        risk.append(np.bincount(state[:, t], weights=slip[:, t], minlength=n_states) / np.maximum(seen, 1))
        occupancy.append(seen / len(state))
    return np.array(risk), np.array(occupancy)


def solve_per_step(risk: np.ndarray, occupancy: np.ndarray, budget: int):
    """The exact capped solution of the river whose agent slips with ``risk[t, s]`` (help never slips) and whose
    state at step t is a draw of ``occupancy[t]``, whatever came before (the rapids' risks are independent)."""
    from tabular_rl.estimate import TabularModel
    from tabular_rl.solvers.exact import solve_exact

    horizon, S = risk.shape
    transitions, rewards = np.zeros((horizon, S, 2, S + 1)), np.zeros((horizon, S, 2))
    for t in range(horizon):
        if t < horizon - 1:
            transitions[t, :, 0, :S] = (1 - risk[t])[:, None] * occupancy[t + 1]
            transitions[t, :, 0, S] = risk[t]
            transitions[t, :, 1, :S] = occupancy[t + 1]
        else:
            transitions[t, :, :, S] = 1.0
            rewards[t, :, 0], rewards[t, :, 1] = 1 - risk[t], 1.0
    return solve_exact(TabularModel(transitions=transitions, rewards=rewards, start=occupancy[0]), budget)


def current_family(kept: dict, before_smooth: bool = False) -> list[dict]:
    """The family this commit's distill would build for the kept run's configured solve (its first member): members
    added since the run have no cross-fitted figure (NaN) and are never the chosen one, but are read in truth.
    ``before_smooth``: without the smooth member (the family the stationary member's reading was made with)."""
    from helper.solve.select import family_for

    own = MemberSpec.from_dict(kept["family"][0])
    solved = {"bins": own.bins, "binning": own.binning, "step_buckets": own.step_buckets, "backoff": own.backoff,
              "pessimism": own.pessimism}
    family = family_for(solved, kept["labels"], kept["selection"]["budgets"])
    return [spec.to_dict() for spec in family if not (before_smooth and spec.dynamics == "smooth")]


def rechosen(kept: dict) -> dict:
    """``kept`` with its selection's figures read again on its training rows and the member of each cap the one this
    commit's rule chooses (``CrossFitted.chosen``); the figures must be the run's own (the same judge)."""
    from helper.solve.select import cross_fitted_family

    labels, selection = kept["labels"], kept["selection"]
    specs = [MemberSpec.from_dict(d) for d in kept["family"]]
    table, _, _ = cross_fitted_family(labels, specs, selection["budgets"], int(selection["folds"]),
                                      judge_prior=selection.get("judge_prior", "steps"))
    index = {name: i for i, name in enumerate(selection["members"])}
    for i, spec in enumerate(specs):
        if spec.name in index and not np.allclose(table.success[i], selection["success"][index[spec.name]], atol=1e-6):
            raise SystemExit(f"{spec.name}: its cross-fitted figures read again differ from the run's selection.json; "
                             "the run was judged by another commit's judge, so --rechoose cannot read it")
    chosen = table.chosen()
    return kept | {"selection": selection | {
        "members": [s.name for s in specs], "success": table.success.tolist(),
        "chosen": {str(c): {"member": {"name": specs[i].name}} for c, i in chosen.items()}}}


def member_table(kept: dict) -> pl.DataFrame:
    """One row per member and cap: its cross-fitted success, its true success, and whether distill chose it."""
    labels, selection = kept["labels"], kept["selection"]
    rivers = kept["rivers"].sort(["river", "step"])
    horizon = int(rivers["step"].max()) + 1
    scores = rivers["prm_score"].to_numpy().reshape(-1, horizon)
    slip = rivers["slip"].to_numpy().reshape(-1, horizon)
    specs = [MemberSpec.from_dict(d) for d in kept["family"]]
    targets = own_rewards(labels, Columns()) if any(s.binning == "supervised" for s in specs) else None
    budgets = [int(b) for b in selection["budgets"]]
    index = {name: i for i, name in enumerate(selection["members"])}
    chosen = {int(c): entry["member"]["name"] for c, entry in selection["chosen"].items()}
    rows, bound = [], {c: ceiling(scores, slip, c) for c in budgets}
    for spec in specs:
        member = fit_member(spec, labels, max(budgets), targets=targets, objective="success")
        for j, c in enumerate(budgets):
            rows.append({"member": spec.name, "kind": spec.kind, "C": c,
                         "true": played_in_expectation(member.decide, scores, slip, c),
                         "cross_fitted": selection["success"][index[spec.name]][j] if spec.name in index else None,
                         "chosen": chosen[c] == spec.name,
                         "ceiling": bound[c]})
    return pl.DataFrame(rows, schema_overrides={"cross_fitted": pl.Float64})


def report(name: str, table: pl.DataFrame) -> None:
    print(f"\n{name}: per cap, the chosen member's true success, the best member's, and the judge's reading")
    print(f"{'C':>2}  {'chosen':<24} {'true':>6}  {'best in truth':<24} {'true':>6}  {'regret':>6}  "
          f"{'best thr':>8}  {'ceiling':>7}  {'optimum':>7}  {'rank corr':>9}")
    for c in sorted(table["C"].unique()):
        cap = table.filter(pl.col("C") == c)
        pick = cap.filter(pl.col("chosen")).row(0, named=True)
        best = cap.sort("true", descending=True).row(0, named=True)
        thresholds = cap.filter(pl.col("kind") == "threshold")
        best_thr = thresholds.sort("cross_fitted", descending=True).row(0, named=True)["true"]
        corr = cap.drop_nulls("cross_fitted").select(pl.corr("cross_fitted", "true", method="spearman")).item()
        print(f"{c:>2}  {pick['member']:<24} {pick['true']:6.3f}  {best['member']:<24} {best['true']:6.3f}  "
              f"{best['true'] - pick['true']:6.3f}  {best_thr:8.3f}  {pick['ceiling']:7.3f}  {optimum(c)[0]:7.3f}  "
              f"{corr:9.2f}")
    caps = sorted(table["C"].unique())
    print("  every table member's true success at C = " + " / ".join(str(c) for c in caps) + ": " + "; ".join(
        f"{m} " + " / ".join(f"{v:.3f}" for v in rows.sort("C")["true"])
        for (m,), rows in table.filter(pl.col("kind") != "threshold").group_by("member", maintain_order=True)))
    tables = (table.filter(pl.col("kind") != "threshold").drop_nulls("cross_fitted")
              .with_columns(bias=pl.col("cross_fitted") - pl.col("true")))
    by_member = tables.group_by("member", maintain_order=True).agg(pl.col("bias").mean())
    thresholds = table.filter(pl.col("kind") == "threshold")
    print("  judge's bias (cross-fitted - true, mean over caps): " + ", ".join(
        f"{m} {b:+.3f}" for m, b in by_member.iter_rows()) +
        f", thresholds {(thresholds['cross_fitted'] - thresholds['true']).mean():+.3f}")


def scale(name: str, kept: dict) -> None:
    """Per step, the quartiles and 10/90th percentiles of the training rows' scores (out of fold: what the members'
    edges are cut on) beside the fresh rivers' (the scores the gate reads)."""
    labels, rivers = kept["labels"], kept["rivers"]
    print(f"\n{name}: score quantiles 10 / 25 / 50 / 75 / 90 %, training rows (out of fold) | fresh rivers")
    for t in sorted(rivers["step"].unique()):
        own = labels.filter(pl.col("step") == t)["prm_score"].to_numpy()
        read = rivers.filter(pl.col("step") == t)["prm_score"].to_numpy()
        quantiles = (0.1, 0.25, 0.5, 0.75, 0.9)
        print(f"  step {t}: " + " ".join(f"{v:.3f}" for v in np.quantile(own, quantiles)) + "  |  "
              + " ".join(f"{v:.3f}" for v in np.quantile(read, quantiles)))


def pooled(tables: list[pl.DataFrame]) -> None:
    """Per cap, the mean over the runs of the chosen member's, the best member's and the folds' threshold's true
    success, the ceiling and the optimum, and the share of the room above that threshold the chosen member captures."""
    print(f"\npooled over {len(tables)} run(s), in truth: captured = (chosen - threshold) / (optimum - threshold)")
    print(f"{'C':>2}  {'chosen':>6}  {'best':>6}  {'thresh':>6}  {'ceiling':>7}  {'optimum':>7}  {'captured':>8}")
    for c in sorted(tables[0]["C"].unique()):
        chosen, best, threshold, bound = [], [], [], []
        for table in tables:
            cap = table.filter(pl.col("C") == c)
            chosen.append(cap.filter(pl.col("chosen"))["true"][0])
            best.append(cap["true"].max())
            threshold.append(cap.filter(pl.col("kind") == "threshold").sort("cross_fitted", descending=True)["true"][0])
            bound.append(cap["ceiling"][0])
        top, low = optimum(c)[0], float(np.mean(threshold))
        print(f"{c:>2}  {np.mean(chosen):6.3f}  {np.mean(best):6.3f}  {low:6.3f}  {np.mean(bound):7.3f}  {top:7.3f}  "
              f"{(np.mean(chosen) - low) / (top - low):8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="finished rapids pipeline folders")
    parser.add_argument("--rivers", type=int, default=500, help="fresh rivers per run")
    parser.add_argument("--save", type=Path, help="keep what the table reads under this folder, one subfolder per run")
    parser.add_argument("--from", dest="sources", type=Path, nargs="+", help="read kept folders instead of runs")
    parser.add_argument("--current-family", action="store_true",
                        help="read every member this commit's family holds, not only those the run's distill tried")
    parser.add_argument("--before-smooth", action="store_true",
                        help="with --current-family: leave the smooth member out (the family before it joined)")
    parser.add_argument("--scale", action="store_true",
                        help="print only the training rows' and the rivers' score quantiles per step")
    parser.add_argument("--pooled", action="store_true", help="end with the mean over the runs and the captured share")
    parser.add_argument("--rechoose", action="store_true",
                        help="the member this commit's rule chooses from the run's cross-fitted table, read again")
    args = parser.parse_args()
    if bool(args.runs) == bool(args.sources):
        parser.error("give either run folders or --from KEPT_FOLDER ...")
    tables = []
    for source in args.sources or args.runs:
        kept = load(source) if args.sources else gather(source, args.rivers)
        if args.save:
            save(kept, args.save / source.name)
        if args.scale:
            scale(str(source), kept)
            continue
        if args.current_family:
            kept = kept | {"family": current_family(kept, args.before_smooth)}
        if args.rechoose:
            kept = rechosen(kept)
        tables.append(member_table(kept))
        report(str(source), tables[-1])
    if args.pooled and tables:
        pooled(tables)


if __name__ == "__main__":
    main()
