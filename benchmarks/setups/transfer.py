"""Why the helper ties random on product groups it never saw, and what more training data changes.

    python benchmarks/setups/transfer.py runs/evidence/productqa-proposal-plain --seeds 0 1 2

For a finished ``benchmarks/setups/evidence.py productqa`` set-up (one ``helpgate pipeline`` run per seed,
proposal mode), this script:

1. collects the base agent alone (no interventions) on the held-out test groups, 64 episodes per
   seed with the sweep's own seed (1000 + S, 4 questions: the first 32 are the sweep's held-out
   episodes), logging every proposal and its outcome (``<setup>/test-rows/seed<S>``);
2. scores them with each seed's PRM and replays every policy fitted on that seed's training rows
   (``benchmarks/setups/solver_cv.py --transfer``): how much of the room the score leaves above random the
   helper takes, and how the score moved between the training groups and the test groups;
3. pools the seeds' training trajectories (3 x 64 = 192 episodes of the training groups, disjoint
   episodes), trains one PRM on them exactly as the pipeline does (proposal target, first 8 layers,
   5 group folds, out-of-fold scores), solves, and replays that helper on the same test episodes;
   a last table keeps the pooled PRM's scores but fits each seed's solve on its own 64 episodes, to
   tell what the larger PRM training set gives from what the larger solve gives.

A first table checks the replay against the live sweep on the sweep's own held-out episodes (the
first 32 of each seed): the same never, and the helper within a few hundredths (the replay plays the
solved table on logged proposals; live, the distilled classifier plays and an intervention's answer
enters the agent's memory). Every stage is skipped when its output exists, so a killed run resumes. The two tables printed at
the end are the ones in ``benchmarks/RESULTS.md``. Only the training groups ever fit anything; the
test groups are replayed, never used to choose a setting.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.setups import solver_cv  # noqa: E402

TEST_EPISODES = 64


def done(folder: Path) -> bool:
    return (folder / ".done").exists()


def mark(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".done").write_text("")


def collect_test_rows(run: Path, seed: int, out: Path) -> None:
    from helper.data.collect import CollectConfig
    from helper.data.collect import run as collect
    from helper.stored_config import config_of

    config = json.loads((run / "pipeline.json").read_text())
    collect(config_of(CollectConfig, env="productqa", data=config["data"], split="test", agent="llm", model=config["agent"],
                          explore_p=[0.0], episodes=TEST_EPISODES, questions_per_episode=config["questions_per_episode"],
                          budget=config["questions_per_episode"], seed=seed + 1000, out=str(out), shard_size=16,
                          decide_after="proposal", agent_dtype=config["agent_dtype"],
                          # The run's own agent settings where its pipeline.json records them.
                          **{k: config[k] for k in ("decoding", "memory", "max_new_tokens", "consistency_samples")
                             if k in config}))


def score(data: Path, prm: Path, out: Path | None = None) -> None:
    from prm.scoring.score import ScoreConfig, run_score

    run_score(ScoreConfig(data=str(data), model=str(prm), out=None if out is None else str(out)))


def pool_and_train(runs: list[Path], root: Path) -> Path:
    """The seeds' training shards in one folder, a PRM trained on them, scored and solved like the pipeline."""
    from helper.solve.solve_command import SolveConfig
    from helper.solve.solve_command import run as solve
    from prm.training.train import TrainConfig, run_train

    pooled, prm, solved = root / "trajectories", root / "prm", root / "solve"
    config = json.loads((runs[0] / "pipeline.json").read_text())
    if not done(pooled):
        for run in runs:
            target = pooled / run.name
            target.mkdir(parents=True, exist_ok=True)
            for shard in sorted((run / "trajectories").glob("*.parquet")):
                shutil.copy2(shard, target / shard.name)
        manifest = json.loads((runs[0] / "trajectories" / "manifest.json").read_text())
        manifest["config"] |= {"out": str(pooled), "episodes": sum(
            json.loads((r / "pipeline.json").read_text())["episodes"] or 64 for r in runs)}
        manifest.pop("shards", None)
        (pooled / "manifest.json").write_text(json.dumps(manifest, indent=1))
        mark(pooled)
    if not done(prm):
        run_train(TrainConfig(data=str(pooled), out=str(prm), model=config["prm_model"], head="value",
                              tag_after="proposal", target="proposal", base_only=False, seed=0, layers=8, folds=5))
        score(pooled, prm)  # out-of-fold scores of the training rows
        mark(prm)
    if not done(solved):
        budgets = list(range(1, config["questions_per_episode"] + 1))  # as the pipeline: up to the horizon
        solve(SolveConfig(data=str(pooled), budget=budgets, bins=config["bins"], out=str(solved)))
        (root / "pipeline.json").write_text(json.dumps({"bins": config["bins"]}))
        mark(solved)
    return root


def pooled_scores_own_solve(runs: list[Path], pooled: Path, scored: list[Path], budgets: list[int]) -> str:
    """Which half of "more data" helps: the pooled PRM's scores, each seed's solve fitted on its own 64
    episodes only (their out-of-fold scores from the pooled PRM), replayed on the same test episodes."""
    import polars as pl

    rows, bins = solver_cv.load_run(pooled)
    pairs = []
    for run, folder in zip(runs, scored):
        own_ids = solver_cv.load_run(run)[0]["episode_id"].unique().to_list()
        pairs.append((rows.filter(pl.col("episode_id").is_in(own_ids)), bins, solver_cv.load_transfer(folder),
                      str(folder)))
    return solver_cv.replay_pairs(pairs, budgets)


def replay_against_live(runs: list[Path], scored: list[Path], budgets: list[int]) -> str:
    """The replayed helper (the solved table, logged proposals) against the live sweep's helper (the
    distilled classifier, an intervention's answer in memory) on the sweep's own held-out episodes."""
    import pandas as pd
    import polars as pl

    lines = ["| seed | episodes | never (live / logged) | " + " | ".join(f"helper C={c} (replay / live)" for c in budgets)
             + " |", "|---|---|---|" + "---|" * len(budgets)]
    for run, folder in zip(runs, scored):
        rows, bins = solver_cv.load_run(run)
        live = pd.read_csv(run / "sweep" / "episodes.csv")
        other = solver_cv.load_transfer(folder).filter(pl.col("episode_id").is_in(live.episode_id.tolist()))
        helped = solver_cv.intervention_reward(rows)
        replayed = pd.DataFrame(solver_cv.replay(rows, solver_cv.episodes_of(other, helped), bins, budgets, helped))
        cells = []
        for c in budgets:
            mine = replayed[(replayed.method == "helper") & (replayed.budget == c)].set_index("episode").success
            theirs = live[(live.method == "helper") & (live.budget == c)].set_index("episode_id").success
            mine, theirs = mine.align(theirs, join="inner")
            cells.append(f"{mine.mean():.3f} / {theirs.mean():.3f}")
        lines.append(f"| {run.name} | {other['episode_id'].n_unique()} | {live[live.method == 'never'].success.mean():.3f}"
                     f" / {solver_cv.never_of(other).mean():.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setup", type=Path, help="an evidence.py productqa set-up folder in proposal mode")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args(argv)
    runs = [args.setup / f"seed{s}" for s in args.seeds]
    for run in runs:
        if not (run / "sweep" / ".done").exists() and not (run / "solve" / "labels.parquet").exists():
            raise SystemExit(f"{run}: not a finished pipeline run; run benchmarks/setups/evidence.py productqa first.")
    own, pooled_scores = [], []
    pooled = args.setup / "pooled"
    for seed, run in zip(args.seeds, runs):
        rows = args.setup / "test-rows" / f"seed{seed}"
        if not done(rows):
            collect_test_rows(run, seed, rows)
            mark(rows)
        scored = args.setup / "test-rows" / f"seed{seed}-scored"
        if not done(scored):
            score(rows, run / "prm", scored)
            mark(scored)
        own.append(scored)
    pool_and_train(runs, pooled)
    for seed in args.seeds:
        scored = args.setup / "test-rows" / f"seed{seed}-pooled-scored"
        if not done(scored):
            score(args.setup / "test-rows" / f"seed{seed}", pooled / "prm", scored)
            mark(scored)
        pooled_scores.append(scored)
    budgets = ["--budgets", *map(str, args.budgets)]
    each = solver_cv.main([*map(str, runs), "--transfer", *map(str, own), *budgets])
    together = solver_cv.main([*[str(pooled)] * len(runs), "--transfer", *map(str, pooled_scores), *budgets])
    split = pooled_scores_own_solve(runs, pooled, pooled_scores, args.budgets)
    check = replay_against_live(runs, own, args.budgets)
    print(check)
    text = (f"### Is the replay the live sweep? The sweep's held-out episodes, replayed and live\n\n{check}\n\n"
            f"### Each seed's helper (64 training episodes) on the test groups\n\n{each}\n\n"
            f"### One helper from the {len(runs)} seeds' training episodes pooled, on the same test episodes\n\n{together}"
            f"\n\n### The pooled PRM's scores, each seed's solve on its own 64 episodes\n\n{split}")
    (args.setup / "transfer.md").write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
