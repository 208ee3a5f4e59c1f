"""Does the solver place a budget well? Cross-validated replay of the logged proposal outcomes.

    python benchmarks/solver_cv.py runs/evidence/main-proposal/seed0 runs/evidence/main-proposal/seed1

A sweep measures the helper on fresh held-out episodes, so it mixes three things: how well the
score ranks mistakes, how well the solver spends C on that score, and how the held-out episodes
differ from the training ones. This script isolates the second. In ``proposal`` mode every logged
row carries the base agent's proposal, its outcome (``proposal_reward``, logged also where an
intervention replaced it) and its out-of-fold PRM score, so any gate that decides after the
proposal can be replayed on logged episodes without running a model: keep the proposal and score
its logged outcome, or intervene and score what an intervention earns (the mean reward of the
logged intervened rows: 1.000 with the human as strong actor).

Per run folder (``helpgate pipeline --decide-after proposal``; its ``solve/labels.parquet``), the
episodes are split into ``--folds`` folds; each fold's policies are fitted on the other folds
exactly as the pipeline fits them (quantile bins as in the run's ``pipeline.json``, the exact
hard-budget solve; the table itself, no distillation) and replayed on the fold:

- ``helper``: the solved table at C;
- ``helper_priced``: the same solve with a price on each intervention, the price set (on the
  training folds) so that it spends what ``prm_threshold`` spends there: the helper's choice of
  *where* at the threshold's intervention count;
- ``prm_threshold``: the score's ``C / decisions`` quantile of the training folds, capped at C;
- ``first_k``, ``random`` (C of the episode's decisions uniformly: its exact expectation) and
  ``oracle`` (per episode the C decisions whose proposals were wrong: the hindsight optimum).

The replay assumes a decision does not change the later proposals (no memory effect); it is a
measurement of the solver on the training distribution, not of the deployed gate. The tables pool
every run's episodes: success, interventions per episode, gain per intervention over never, and
helper minus method on the same episodes with a 95% paired bootstrap interval.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helper.baselines import calibrate_threshold
from helper.metrics import paired_difference
from tabular_rl.discretize import Discretizer
from tabular_rl.estimate import estimate
from tabular_rl.solve import solve

METHODS = ("helper", "helper_priced", "prm_threshold", "first_k", "random", "oracle")
NEEDED = ("episode_id", "step", "intervened", "reward", "proposal_reward", "prm_score")


def load_run(folder: Path) -> tuple[pl.DataFrame, int]:
    """The run's scored, labelled rows (sorted by episode and step) and its number of score bins."""
    labels = folder / "solve" / "labels.parquet"
    if not labels.exists():
        raise SystemExit(f"{labels}: not found; give a folder written by `helpgate pipeline --decide-after proposal`.")
    rows = pl.read_parquet(labels)
    missing = [c for c in NEEDED if c not in rows.columns]
    if missing or rows["proposal_reward"].null_count():
        raise SystemExit(f"{labels}: needs {list(NEEDED)} with proposal_reward at every row (a run in proposal mode); "
                         f"missing {missing or ['proposal_reward values']}.")
    config = json.loads((folder / "pipeline.json").read_text()) if (folder / "pipeline.json").exists() else {}
    return rows.sort(["episode_id", "step"]), int(config.get("bins", 6))


class Episode:
    """One logged episode as the replay needs it: score and proposal outcome per decision."""

    def __init__(self, frame: pl.DataFrame, intervention_reward: float):
        self.id = frame["episode_id"][0]
        self.steps = frame["step"].to_numpy()
        self.scores = frame["prm_score"].to_numpy()
        self.kept = frame["proposal_reward"].to_numpy().astype(float)
        self.helped = intervention_reward

    def play(self, wants, budget: int) -> tuple[float, int]:
        """Replay a gate ``wants(step, score, budget_left) -> bool``: (success, interventions)."""
        left, total = budget, 0.0
        for step, score, kept in zip(self.steps, self.scores, self.kept):
            act = left > 0 and bool(wants(int(step), float(score), left))
            total += self.helped if act else kept
            left -= act
        return total / len(self.steps), budget - left

    def random(self, budget: int) -> tuple[float, int]:
        """Exact expectation of intervening at ``budget`` of the decisions drawn uniformly."""
        share = min(budget, len(self.kept)) / len(self.kept)
        return float(np.mean(share * self.helped + (1 - share) * self.kept)), min(budget, len(self.kept))

    def oracle(self, budget: int) -> tuple[float, int]:
        gains = np.sort(np.maximum(self.helped - self.kept, 0.0))[::-1]
        used = int(min(budget, (gains > 0).sum()))
        return float((self.kept.sum() + gains[:used].sum()) / len(self.kept)), used


def table_gate(train: pl.DataFrame, bins: int, budget: int, price: float = 0.0):
    """The pipeline's solve on ``train`` (quantile bins, exact hard budget), a price per intervention."""
    disc = Discretizer(bins, "quantile", 0).fit(train["prm_score"], train["step"])
    model = estimate(train, disc, smoothing=1.0, backoff="auto", objective="success")
    model.rewards[:, :, 1] -= price  # the Lagrangian term: each intervention costs `price` of success
    solution = solve(model, budget, "exact")
    last = model.horizon - 1

    def wants(step, score, left):
        state = disc.transform(np.array([score]), np.array([step]))[0]
        return solution.policy[min(step, last), state, min(left, budget)] > 0.5

    return wants, solution.expected_interventions


def priced_gate(train: pl.DataFrame, bins: int, budget: int, target: float):
    """The helper's solve priced so that its expected interventions on ``train`` fall to ``target``."""
    low, high = 0.0, 1.0
    for _ in range(30):  # expected interventions fall as the price rises: bisect on the price
        middle = (low + high) / 2
        if table_gate(train, bins, budget, middle)[1] > target:
            low = middle
        else:
            high = middle
    return table_gate(train, bins, budget, high)[0]


def run_folds(rows: pl.DataFrame, bins: int, budgets: list[int], folds: int, seed: int) -> list[dict]:
    """Per held-out episode, method and budget: the replayed success and interventions."""
    helped = float(rows.filter(pl.col("intervened"))["reward"].mean())
    ids = np.array(sorted(rows["episode_id"].unique().to_list()))
    order = np.random.default_rng(seed).permutation(len(ids))
    records = []
    for fold in range(folds):
        test_ids = set(ids[order[fold::folds]])
        train = rows.filter(~pl.col("episode_id").is_in(test_ids))
        test = [Episode(frame, helped) for _, frame in
                rows.filter(pl.col("episode_id").is_in(test_ids)).group_by("episode_id", maintain_order=True)]
        train_episodes = [Episode(frame, helped) for _, frame in train.group_by("episode_id", maintain_order=True)]
        decisions = float(np.mean([len(e.kept) for e in train_episodes]))
        for budget in budgets:
            threshold = calibrate_threshold(train["prm_score"].to_numpy(), decisions, budget)
            by_threshold = lambda step, score, left, t=threshold: score <= t  # noqa: E731
            spent = float(np.mean([e.play(by_threshold, budget)[1] for e in train_episodes]))
            gates = {"helper": table_gate(train, bins, budget)[0],
                     "helper_priced": priced_gate(train, bins, budget, spent),
                     "prm_threshold": by_threshold,
                     "first_k": lambda step, score, left: True}
            for episode in test:
                outcomes = {name: episode.play(gate, budget) for name, gate in gates.items()}
                outcomes |= {"random": episode.random(budget), "oracle": episode.oracle(budget)}
                records += [{"episode": episode.id, "method": name, "budget": budget, "success": s,
                             "interventions": u} for name, (s, u) in outcomes.items()]
    return records


def report(records: pl.DataFrame, never: float, runs: int) -> str:
    budgets = sorted(records["budget"].unique().to_list())
    lines = [f"{runs} run(s), {records['episode'].n_unique()} episodes, never = {never:.3f} (logged proposals)", "",
             "| method | " + " | ".join(f"C={c}" for c in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for method in METHODS:
        cells = []
        for budget in budgets:
            mine = records.filter((pl.col("method") == method) & (pl.col("budget") == budget)).sort("episode")
            success, used = mine["success"].mean(), mine["interventions"].mean()
            gain = (success - never) / used if used else float("nan")
            cell = f"{success:.3f} ({used:.2f}; {gain:+.3f}/int)"
            if method != "helper":
                helper = records.filter((pl.col("method") == "helper") & (pl.col("budget") == budget)).sort("episode")
                diff, low, high = paired_difference(helper["success"].to_numpy(), mine["success"].to_numpy())
                cell += f" Δ {diff:+.3f} [{low:+.3f}, {high:+.3f}]"
            cells.append(cell)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: success (interventions per episode; success gained over never per intervention); "
              "Δ = helper minus method on the same episodes, 95% paired bootstrap interval."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="pipeline run folders in proposal mode")
    parser.add_argument("--budgets", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seed of the fold split")
    args = parser.parse_args(argv)
    frames, never = [], []
    for folder in args.runs:
        rows, bins = load_run(folder)
        records = pl.DataFrame(run_folds(rows, bins, args.budgets, args.folds, args.seed))
        frames.append(records.with_columns((pl.lit(f"{folder}:") + pl.col("episode")).alias("episode")))
        never.append(rows.group_by("episode_id").agg(pl.col("proposal_reward").mean())["proposal_reward"].to_numpy())
    text = report(pl.concat(frames), float(np.concatenate(never).mean()), len(args.runs))
    print(text)
    return text


if __name__ == "__main__":
    main()
