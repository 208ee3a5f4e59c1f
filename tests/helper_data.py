"""Builders shared by the helper tests: simulated trajectories, a solve folder, a helper folder.

The base agent is the simulator (known per-type accuracy) on the generated ProductQA catalog;
``prm_score`` is the simulator's own success probability, i.e. what a perfect PRM would say, so
that the optimal labels are known and the distilled helper can be checked against them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.catalog_generator import default_catalog_dir
from agile.executor.episode import AgileSource
from agile.rollout import run_episodes
from prm.data.folds import task_type
from trajectories.shards import write_shard
from trajectories.shards import mark_complete

HORIZON = 6


class PerfectScorer:
    """``score(observation)``: the simulator's probability of answering correctly."""

    def __init__(self):
        self.simulator = SimulatorAgent()

    def score(self, observation) -> float:
        return self.simulator.success_probability(observation)


def trajectories(directory: Path, n: int = 120, seed: int = 11) -> Path:
    agent = SimulatorAgent(seed=0)
    source = AgileSource(default_catalog_dir(0), "train", model=None, memory="lexical")
    episodes = source.episodes(range(n), seed, questions_per_episode=HORIZON)
    explore = [(0.1, 0.3, 0.5)[i % 3] for i in range(n)]
    records = run_episodes(episodes, agent, budget=HORIZON, explore_p=explore, rng_seed=5)
    frame = pl.DataFrame([r.to_row() for episode in records for r in episode]).drop(
        ["cf_base_success", "cf_intervene_success"])
    scorer = PerfectScorer()
    accuracy = scorer.simulator.accuracy
    # The question type is not a logged feature (a deployed agent never has it); ProductQA question
    # ids name it.
    perfect = [accuracy[task_type(t)] for t in frame["task_id"]]
    write_shard(frame.with_columns(pl.Series("prm_score", perfect)), directory / "shard-000.parquet")
    mark_complete(directory)  # a finished collection, as collect leaves it
    return directory


def solved(directory: Path, data: Path, budgets=(1, 2)) -> Path:
    from helper.gate.solve_command import SolveConfig, run

    run(SolveConfig(data=str(data), budgets=list(budgets), bins=3, out=str(directory)))
    return directory
