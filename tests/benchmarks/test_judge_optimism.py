"""benchmarks/setups/judge_optimism.py: the rivers it simulates from the training rows' model are that model's (a
gate's simulated success is the model's exact chance to reach the end) and log interventions at the stated rate."""

from __future__ import annotations

import numpy as np

from examples.rapids_optimum import logged_rows
from tests.imports import benchmark_module

optimism = benchmark_module("judge_optimism")


def test_simulated_rivers_are_the_models_own():
    sim = optimism.Sim(logged_rows(400, 3, noise=0.1, explore=optimism.EXPLORE))
    rng = np.random.default_rng(0)
    alive = sim.M.start / sim.M.start.sum()  # the model's chance to reach the last crossing with no help, exactly
    for t in range(sim.T - 1):
        alive = alive @ sim.M.transitions[t, :, 0, :sim.S]
    exact = alive.sum()
    played = sim.rivers(4000, rng, decide=lambda t, x, left: np.zeros(len(t), dtype=bool), budget=0)
    assert abs(played - exact) < 0.03

    logged = sim.rivers(1000, rng)
    assert abs(logged["intervened"].mean() - optimism.EXPLORE) < 0.03
    ended = logged.filter(logged["done"])
    assert ended.height == 1000  # each river ends once: a slip or its last crossing
