"""Builders shared by the helper tests: simulated trajectories, a solve folder, a helper folder.

The base agent is the simulator (known per-type accuracy) on the generated ProductQA catalog;
``prm_score`` is the simulator's own success probability, i.e. what a perfect PRM would say, so
that the optimal labels are known and the distilled helper can be checked against them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from agile.agents.simulator_agent import SimulatorAgent
from agile.envs.catalog_generator import default_catalog_dir
from agile.executor.episode import AgileSource
from agile.rollout import run_episodes
from helper.gates.features import FeatureClassifier, frame_features
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


def complete_folder(frame: pl.DataFrame, data: Path) -> Path:
    """``frame`` as a finished trajectories folder ``data`` (one shard, marked complete), as collection leaves one."""
    data.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(data / "part-000.parquet")
    mark_complete(data)
    return data


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
    from helper.solve.solve_command import SolveConfig, run

    run(SolveConfig(data=str(data), budgets=list(budgets), bins=3, out=str(directory)))
    return directory


NAMES = ["prm_score", "step", "budget_left", "f_memory_hits"]
"""The feature names of a helper folder's classifier (``classifier``)."""


def classifier(names) -> FeatureClassifier:
    """A logistic-regression ``FeatureClassifier`` on ``names``, fitted on 40 seeded random rows."""
    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"episode_id": ["e"] * 40, "step": np.arange(40) % 4, "horizon": [4] * 40,
                          "budget_left": rng.integers(1, 3, 40), "prm_score": rng.random(40),
                          "features": ['{"memory_hits": 1.0}'] * 40})
    return FeatureClassifier("logreg", names).fit(frame_features(frame, names), rng.integers(0, 2, 40))


def tiny_scoring_prm(tag_after: str):
    """The tiny PRM with a random value head (an untrained one is 0.5 everywhere), seeded: scores that vary."""
    import torch

    from prm.verifiers.model import ProcessRewardModel

    prm = ProcessRewardModel.create("tiny", tag_after=tag_after, device="cpu", seed=0)
    torch.manual_seed(0)
    prm.head.linear.weight.data.normal_(0, 1.0)
    return prm
