"""Where the timing of help matters: the helper against the best threshold and the exact optimum on the rapids.

    for s in 0 1 2; do helpgate pipeline --env examples.rapids:make_episodes --agent examples.rapids:make_agent \\
        --budgets 1 2 3 4 5 --seed $s --out runs/rapids/seed$s; done
    python benchmarks/setups/rapids.py runs/rapids/seed0 runs/rapids/seed1 runs/rapids/seed2 --expected 2000

``examples/rapids.py``: six crossings, the last two mostly dangerous, every text telling the risk here and the
rapids ahead. The room is first computed exactly (``examples.rapids_optimum``): the optimum under each cap C against
the best static threshold on an ideal verifier of the crossing's own risk and on an ideal verifier of success from
here, every level tried. Then, per run folder (a pipeline with the defaults: the verifier's target, pooling and
bins chosen on the training folds), on ``--expected N`` held-out episodes in expectation over the slips (the gates
play beside a sure-footed agent, each episode counting its exact success probability, as
``benchmarks/setups/plain_cue.py --expected`` does): the helper (the member its training folds chose for C), the
full-strength ``prm_threshold`` (the level its training folds chose for C, on the run's own PRM) and the exact
optimal gate, on the same episodes. The share of the room captured is (helper − threshold) / (optimum − threshold)
per C, pooled over the seeds; the goal (issue 58) is 0.8 where the room is at least 0.05.

A run's kept data (``benchmarks/setups/keep_run.py``) holds no models, so ``--save FILE`` writes every held-out
episode's success probability per method and C (and the member the helper played), as Parquet (``.parquet``) or
CSV, to commit beside it, and ``--from FILE ...`` prints the same tables from those files alone:

    python benchmarks/setups/rapids.py --from benchmarks/data/rapids-rerun/expected-even.parquet
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository's examples

from helper.gates.simple import NeverGate, ScoreThresholdGate  # noqa: E402
from examples.plain_cue_optimum import SureFootedAgent, expected_outcome  # noqa: E402
from examples.rapids_optimum import best_threshold, optimal_gate, optimum, room_at_spend  # noqa: E402
from helper.data.environment import Environment  # noqa: E402
from helper.evaluation.play import evaluate_gate, load_helper  # noqa: E402
from helper.evaluation.sweep import SweepConfig  # noqa: E402
from helper.stored_config import config_of  # noqa: E402

ROOM, CAPTURE = 0.05, 0.8


def room_table(budgets: list[int]) -> dict[int, dict]:
    print("exact, in expectation over the risks (examples.rapids_optimum):")
    print(f"{'C':>2}  {'optimum':>7}  {'thr process':>11}  {'thr outcome':>11}  {'room':>6}")
    out = {}
    for c in budgets:
        best, _ = optimum(c)
        thresholds = best_threshold(c)
        out[c] = {"optimum": best, **thresholds, "room": best - max(thresholds.values())}
        print(f"{c:>2}  {best:7.4f}  {thresholds['process']:11.4f}  {thresholds['outcome']:11.4f}  {out[c]['room']:6.4f}")
    print("at a spend s an episode, no cap (examples.rapids_optimum.room_at_spend: the best of the two ideal "
          "thresholds, read between levels):")
    print(f"{'s':>2}  {'optimum':>7}  {'threshold':>9}  {'room':>6}")
    for s in budgets:
        at = room_at_spend(s)
        print(f"{s:>2}  {at['optimum']:7.4f}  {at['threshold']:9.4f}  {at['room']:6.4f}")
    return out


class ScoresOnce:
    """The run's PRM score of every held-out state, computed once per episode (one batched pass): a rapids text and
    the answers before it do not depend on who gave them (the expert names the same marker), so a gate's score at a
    state is the same whatever it decided before."""

    decide_after = "state"

    def __init__(self, prm, records) -> None:
        from prm.scoring.score import score_frame

        frame = pl.DataFrame([{"episode_id": r.episode_id, "step": r.step, "state_text": r.state_text,
                               "action_text": r.action_text} for steps in records for r in steps])
        scored = score_frame(prm, frame)
        self.scores = dict(zip(zip(scored["episode_id"], scored["step"]), scored["prm_score"]))

    def score(self, observation, proposal=None) -> float:
        return float(self.scores[(observation.episode_id, observation.step)])


def held_out_walk(run: Path, episodes: int):
    """The run's held-out environment at ``episodes`` rivers beside a sure-footed agent, the run's helper, and every
    held-out state scored once by its verifier (the helper's scorer replaced by ``ScoresOnce``): (summary, env,
    helper, the walk's records)."""
    summary_path = run / "sweep" / "summary.json"
    summary = json.loads(summary_path.read_text())
    cfg = config_of(SweepConfig, {**summary["config"], "episodes": episodes}, where=summary_path)
    env = Environment(cfg)
    env.base = SureFootedAgent()
    helper = load_helper(cfg, cfg.helper_backend)
    _, _, walked = evaluate_gate(env, lambda c: NeverGate(c), [0], "sure-footed walk", ci_resamples=10)
    helper.scorer = ScoresOnce(helper.scorer.prm, walked[0])
    return summary, env, helper, walked[0]


def expected_run(run: Path, budgets: list[int], episodes: int) -> dict[str, dict[int, np.ndarray]]:
    """Per method and C, each held-out episode's success probability, with the slips taken out of the draw."""
    summary, env, helper, _ = held_out_walk(run, episodes)
    levels = {int(c): entry["level"] for c, entry in summary["prm_threshold"]["capped_levels"]["levels"].items()}
    risks = [episode.risks for episode in env.episodes()]

    def threshold(c: int):
        return ScoreThresholdGate(helper.scorer.score, levels[c], c, name="prm_threshold")

    out = {}
    for method, gate in (("helper", helper.with_budget), ("prm_threshold", threshold), ("optimum", optimal_gate)):
        _, _, records = evaluate_gate(env, gate, budgets, f"{method} (no slips)", ci_resamples=10)
        out[method] = {c: np.array([expected_outcome(r, [s.intervened for s in steps])[0]
                                    for r, steps in zip(risks, records[c])]) for c in budgets}
    members = json.loads((run / "helper" / "members" / "selection.json").read_text())["chosen"]
    out["members"] = {int(c): e["member"]["name"] for c, e in members.items()}
    return out


METHODS = ("helper", "prm_threshold", "optimum")


def to_frame(per_run: dict[str, dict]) -> pl.DataFrame:
    """One row per run, method, C and held-out episode: the success probability (and the helper's member)."""
    rows = []
    for run, result in per_run.items():
        for method in METHODS:
            for c, values in result[method].items():
                rows += [{"run": run, "method": method, "C": c, "episode": i, "success": float(v),
                          "member": result["members"].get(c, "")} for i, v in enumerate(values)]
    return pl.DataFrame(rows)


def from_frame(frame: pl.DataFrame) -> dict[str, dict]:
    """``to_frame``'s inverse, the runs in the order they were written."""
    per_run = {}
    for run in frame["run"].unique(maintain_order=True):
        rows = frame.filter(pl.col("run") == run).sort(["method", "C", "episode"])
        result = {m: {int(c): rows.filter((pl.col("method") == m) & (pl.col("C") == c))["success"].to_numpy()
                      for c in rows["C"].unique(maintain_order=True)} for m in METHODS}
        result["members"] = {int(c): m for c, m in rows.select("C", "member").unique(maintain_order=True).iter_rows()}
        per_run[run] = result
    return per_run


def read_kept(path: Path) -> pl.DataFrame:
    """What ``--save`` wrote: Parquet (as kept in the repository, small) or CSV."""
    return pl.read_parquet(path) if path.suffix == ".parquet" else pl.read_csv(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="pipeline output folders (one per seed; their helper folders)")
    parser.add_argument("--expected", type=int, default=2000, metavar="N", help="held-out episodes per seed")
    parser.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--save", type=Path, help="write every episode's success probability to this CSV")
    parser.add_argument("--from", dest="sources", type=Path, nargs="+", help="read the CSVs --save wrote instead of playing")
    args = parser.parse_args()
    if bool(args.runs) == bool(args.sources):
        parser.error("give either run folders or --from CSV")
    rooms = room_table(args.budgets)
    if args.sources:
        per_run = from_frame(pl.concat([read_kept(source) for source in args.sources]))
        args.expected = len(next(iter(per_run.values()))["helper"][args.budgets[0]])
    else:
        per_run = {run: expected_run(Path(run), args.budgets, args.expected) for run in args.runs}
    if args.save:
        frame = to_frame(per_run)
        frame.write_parquet(args.save) if args.save.suffix == ".parquet" else frame.write_csv(args.save)
    print(f"\nper seed, {args.expected} held-out episodes in expectation over the slips "
          "(helper / full-strength prm_threshold / optimum; the member the helper played):")
    for run, result in per_run.items():
        cells = [f"C={c}: {result['helper'][c].mean():.3f} / {result['prm_threshold'][c].mean():.3f} / "
                 f"{result['optimum'][c].mean():.3f} ({result['members'].get(c)})" for c in args.budgets]
        print(f"  {run}: " + "; ".join(cells))
    print(f"\npooled over {len(per_run)} seed(s): captured = (helper - threshold) / (optimum - threshold)")
    print(f"{'C':>2}  {'helper':>6}  {'thresh':>6}  {'optimum':>7}  {'h - thr [95%]':>22}  {'captured':>8}  goal")
    for c in args.budgets:
        helper = np.concatenate([r["helper"][c] for r in per_run.values()])
        thresh = np.concatenate([r["prm_threshold"][c] for r in per_run.values()])
        best = np.concatenate([r["optimum"][c] for r in per_run.values()])
        diff = helper - thresh
        half = 1.96 * diff.std(ddof=1) / np.sqrt(diff.size)
        gap = best.mean() - thresh.mean()
        captured = diff.mean() / gap if gap > 1e-9 else float("nan")
        goal = ("met" if captured >= CAPTURE else "MISSED") if rooms[c]["room"] >= ROOM else "tie expected"
        print(f"{c:>2}  {helper.mean():6.3f}  {thresh.mean():6.3f}  {best.mean():7.3f}  "
              f"{diff.mean():+.3f} [{diff.mean() - half:+.3f}, {diff.mean() + half:+.3f}]  {captured:8.3f}  {goal}")


if __name__ == "__main__":
    main()
