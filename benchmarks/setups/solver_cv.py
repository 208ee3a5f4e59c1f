"""Does the solver place a budget well? Cross-validated replay of the logged proposal outcomes.

    python benchmarks/setups/solver_cv.py runs/evidence/main-proposal/seed0 runs/evidence/main-proposal/seed1

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
  ``oracle`` (per episode the C decisions whose proposals were wrong: the hindsight optimum);
- ``score_ceiling``: per episode the C decisions with the lowest scores, all of the episode's scores
  known in hindsight. No gate can do this (it decides before later scores exist); it is how much a
  per-episode budget can gain from the score's ranking at all, so ``score_ceiling`` minus ``random``
  is the room the score leaves any score-reading gate.

Every gate replayed is the sweep's own (``helper.gates.simple``: ``TableGate``, ``ScoreThresholdGate``, ``FirstKGate``,
``OracleGate``), asked through its ``should_intervene`` with the logged score as the observation's
``prm_score`` feature; ``random`` weighs each decision by ``UniformGate.asked_share``. Each row but
``score_ceiling`` is named as its method in the sweep's registry (``helper.evaluation.methods.METHODS``).

The replay assumes a decision does not change the later proposals (no memory effect); it is a
measurement of the solver on the training distribution, not of the deployed gate. The tables pool
every run's episodes: success, interventions per episode, gain per intervention over never, and
helper minus method on the same episodes with a 95% paired bootstrap interval.

``--transfer ROWS`` asks the same question across a shift: every policy is fitted on all of the run's
rows and replayed on other logged rows (e.g. the test groups' episodes, collected with the base
agent alone and scored by the run's PRM), and a second table sets the two score distributions side
by side (quantiles, the share of rows in each of the training bins, the score's AUROC for the
proposal's correctness). Give one transfer folder per run folder, in the same order (each scored
by its own run's PRM); the replay table pools them:

    collect-offline-trajectories --data ../shared/productqa --split test --agent llm --model smollm2 \
        --decide-after proposal --explore-p 0 --episodes 64 --budget 4 --seed 1000 --out runs/test-rows
    helpgate prm score --data runs/test-rows --model RUN/prm
    python benchmarks/setups/solver_cv.py RUN --transfer runs/test-rows
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helper.gates.simple import FirstKGate, OracleGate, ScoreThresholdGate, TableGate, UniformGate, calibrate_threshold
from agile.protocol import Observation
from helper.evaluation.metrics import paired_difference
from tabular_rl.discretize import Discretizer
from tabular_rl.estimate import estimate
from tabular_rl.solvers import solve

METHODS = ("helper", "helper_priced", "prm_threshold", "first_k", "random", "score_ceiling", "oracle")
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


def load_transfer(folder: Path) -> pl.DataFrame:
    """Scored trajectory shards of other episodes (``helpgate prm score`` output), sorted."""
    from trajectories.shards import read_trajectories

    rows = read_trajectories(folder)
    needed = ("episode_id", "step", "proposal_reward", "prm_score")
    missing = [c for c in needed if c not in rows.columns]
    if missing or rows["proposal_reward"].null_count() or rows["prm_score"].null_count():
        raise SystemExit(f"{folder}: needs {list(needed)} on every row (collect with --decide-after proposal, "
                         f"then `helpgate prm score --data {folder} --model RUN/prm`); missing "
                         f"{missing or ['values']}.")
    return rows.sort(["episode_id", "step"])


class Episode:
    """One logged episode as the replay needs it: score and proposal outcome per decision."""

    def __init__(self, frame: pl.DataFrame, intervention_reward: float):
        self.id = frame["episode_id"][0]
        self.steps = frame["step"].to_numpy()
        self.scores = frame["prm_score"].to_numpy()
        self.kept = frame["proposal_reward"].to_numpy().astype(float)
        self.helped = intervention_reward

    def play(self, gate, budget: int) -> tuple[float, int]:
        """Replay ``gate`` (an ``helper.gates.simple`` gate, reading the logged score as the ``prm_score`` feature) with
        ``budget`` interventions: (success, interventions)."""
        left, total = budget, 0.0
        for step, score, kept in zip(self.steps, self.scores, self.kept):
            observation = Observation(episode_id=self.id, env="replay", task_id=self.id, step=int(step),
                                      state_text="", horizon=len(self.steps), features={"prm_score": float(score)})
            act = gate.should_intervene(observation, left)
            total += self.helped if act else kept
            left -= act
        gate.end_episode(self.id)  # the gate is replayed on the next fold with the same episode id
        return total / len(self.steps), budget - left

    def random(self, budget: int) -> tuple[float, int]:
        """Exact expectation of ``UniformGate`` (``budget`` of the decisions drawn uniformly), no draw."""
        share = UniformGate.asked_share(budget, len(self.kept))
        return float(np.mean(share * self.helped + (1 - share) * self.kept)), min(budget, len(self.kept))

    def score_ceiling(self, budget: int) -> tuple[float, int]:
        """Intervene at the ``budget`` lowest scores of the episode (stable order on ties)."""
        chosen = np.argsort(self.scores, kind="stable")[:budget]
        outcome = self.kept.copy()
        outcome[chosen] = self.helped
        return float(outcome.mean()), len(chosen)

    def oracle(self, budget: int) -> tuple[float, int]:
        """``OracleGate`` on this episode's logged outcomes: kept proposal vs. an intervention."""
        n = len(self.kept)
        return self.play(OracleGate.from_counterfactuals([self.id] * n, self.steps, self.kept, [self.helped] * n,
                                                         budget), budget)


def logged_score(observation: Observation) -> float:
    """The logged out-of-fold PRM score of a replayed decision."""
    return observation.features["prm_score"]


def table_gate(train: pl.DataFrame, bins: int, budget: int, price: float = 0.0):
    """The pipeline's solve on ``train`` (quantile bins, exact hard budget), a price per intervention: its
    ``TableGate`` and expected interventions."""
    disc = Discretizer(bins, "quantile", 0).fit(train["prm_score"], train["step"])
    model = estimate(train, disc, smoothing=1.0, backoff="auto", objective="success")
    model.rewards[:, :, 1] -= price  # the Lagrangian term: each intervention costs `price` of success
    solution = solve(model, budget, "exact")
    state_of = lambda obs: disc.transform(np.array([logged_score(obs)]), np.array([obs.step]))[0]  # noqa: E731
    return TableGate(solution, state_of, budget, name="helper"), solution.expected_interventions


def priced_gate(train: pl.DataFrame, bins: int, budget: int, target: float):
    """The helper's solve priced so that its expected interventions on ``train`` fall to ``target``."""
    low, high = 0.0, 1.0
    for _ in range(30):  # expected interventions fall as the price rises: bisect on the price
        middle = (low + high) / 2
        if table_gate(train, bins, budget, middle)[1] > target:
            low = middle
        else:
            high = middle
    gate = table_gate(train, bins, budget, high)[0]
    gate.name = "helper_priced"
    return gate


def episodes_of(rows: pl.DataFrame, helped: float) -> list[Episode]:
    return [Episode(frame, helped) for _, frame in rows.group_by("episode_id", maintain_order=True)]


def replay(train: pl.DataFrame, test: list[Episode], bins: int, budgets: list[int], helped: float) -> list[dict]:
    """Every method fitted on ``train`` and replayed on ``test``: success and interventions per episode."""
    train_episodes = episodes_of(train, helped)
    decisions = float(np.mean([len(e.kept) for e in train_episodes]))
    records = []
    for budget in budgets:
        threshold = calibrate_threshold(train["prm_score"].to_numpy(), decisions, budget)
        by_threshold = ScoreThresholdGate(logged_score, threshold, budget, name="prm_threshold")
        spent = float(np.mean([e.play(by_threshold, budget)[1] for e in train_episodes]))
        gates = {"helper": table_gate(train, bins, budget)[0],
                 "helper_priced": priced_gate(train, bins, budget, spent),
                 "prm_threshold": by_threshold,
                 "first_k": FirstKGate(budget)}
        for episode in test:
            outcomes = {name: episode.play(gate, budget) for name, gate in gates.items()}
            outcomes |= {"random": episode.random(budget), "score_ceiling": episode.score_ceiling(budget),
                         "oracle": episode.oracle(budget)}
            records += [{"episode": episode.id, "method": name, "budget": budget, "success": s,
                         "interventions": u} for name, (s, u) in outcomes.items()]
    return records


def never_of(rows: pl.DataFrame) -> np.ndarray:
    """Each logged episode's success had every proposal been kept."""
    return rows.group_by("episode_id").agg(pl.col("proposal_reward").mean())["proposal_reward"].to_numpy()


def replay_pairs(pairs: list[tuple[pl.DataFrame, int, pl.DataFrame, str]], budgets: list[int]) -> str:
    """Per (training rows, bins, other rows, name): every policy fitted on the first, replayed on the
    other rows; one report pooling every pair's episodes."""
    frames, never = [], []
    for train, bins, other, name in pairs:
        helped = intervention_reward(train)
        records = pl.DataFrame(replay(train, episodes_of(other, helped), bins, budgets, helped))
        frames.append(records.with_columns((pl.lit(f"{name}:") + pl.col("episode")).alias("episode")))
        never.append(never_of(other))
    return report(pl.concat(frames), float(np.concatenate(never).mean()), len(pairs))


def intervention_reward(rows: pl.DataFrame) -> float:
    """What an intervention earns: the mean reward of the logged intervened rows."""
    return float(rows.filter(pl.col("intervened"))["reward"].mean())


def run_folds(rows: pl.DataFrame, bins: int, budgets: list[int], folds: int, seed: int) -> list[dict]:
    """Per held-out episode, method and budget: the replayed success and interventions."""
    helped = intervention_reward(rows)
    ids = np.array(sorted(rows["episode_id"].unique().to_list()))
    order = np.random.default_rng(seed).permutation(len(ids))
    records = []
    for fold in range(folds):
        test_ids = set(ids[order[fold::folds]])
        train = rows.filter(~pl.col("episode_id").is_in(test_ids))
        test = episodes_of(rows.filter(pl.col("episode_id").is_in(test_ids)), helped)
        records += replay(train, test, bins, budgets, helped)
    return records


def score_shift(train: pl.DataFrame, other: pl.DataFrame, bins: int) -> str:
    """The score on the training rows (out of fold) against the other rows: where it lies and what it ranks."""
    from prm.training.quality import auroc

    disc = Discretizer(bins, "quantile", 0).fit(train["prm_score"], train["step"])
    lines = ["| rows | decisions | proposals right | score p10 / p50 / p90 | AUROC (proposal right) | "
             "AUROC within episodes | share of rows per training bin, lowest first |", "|---|---|---|---|---|---|---|"]
    for name, frame in (("training (out of fold)", train), ("transfer", other)):
        score = frame["prm_score"].to_numpy()
        right = frame["proposal_reward"].to_numpy()
        state = disc.transform(score, frame["step"].to_numpy())
        share = np.bincount(state, minlength=disc.n_score_states)[:disc.bins] / len(state)
        p10, p50, p90 = np.quantile(score, [0.1, 0.5, 0.9])
        # A per-episode budget chooses among one episode's decisions: what counts is the ranking
        # within an episode, so the score minus its episode's mean is ranked too.
        centred = frame.select(pl.col("prm_score") - pl.col("prm_score").mean().over("episode_id"))
        lines.append(f"| {name} | {len(frame)} | {right.mean():.3f} | {p10:.3f} / {p50:.3f} / {p90:.3f} | "
                     f"{auroc(score, right):.3f} | {auroc(centred.to_series().to_numpy(), right):.3f} | "
                     + " ".join(f"{v:.2f}" for v in share) + " |")
    return "\n".join(lines)


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
    parser.add_argument("--transfer", type=Path, nargs="+", default=None,
                        help="per run folder, a scored trajectory folder of other episodes: fit on all of the run's "
                             "rows, replay there")
    args = parser.parse_args(argv)
    if args.transfer is not None:
        return transfer_main(args)
    frames, never = [], []
    for folder in args.runs:
        rows, bins = load_run(folder)
        records = pl.DataFrame(run_folds(rows, bins, args.budgets, args.folds, args.seed))
        frames.append(records.with_columns((pl.lit(f"{folder}:") + pl.col("episode")).alias("episode")))
        never.append(never_of(rows))
    text = report(pl.concat(frames), float(np.concatenate(never).mean()), len(args.runs))
    print(text)
    return text


def transfer_main(args) -> str:
    if len(args.transfer) != len(args.runs):
        raise SystemExit(f"--transfer: give one folder per run folder ({len(args.runs)} runs, "
                         f"{len(args.transfer)} transfer folders).")
    pairs, shifts = [], []
    for run, folder in zip(args.runs, args.transfer):
        rows, bins = load_run(run)
        other = load_transfer(folder)
        pairs.append((rows, bins, other, str(folder)))
        shifts.append(f"{run} -> {folder}\n\n" + score_shift(rows, other, bins))
    text = ("Each run's policies fitted on all of its rows, replayed on its transfer rows\n\n"
            + replay_pairs(pairs, args.budgets) + "\n\n" + "\n\n".join(shifts))
    print(text)
    return text

if __name__ == "__main__":
    main()
