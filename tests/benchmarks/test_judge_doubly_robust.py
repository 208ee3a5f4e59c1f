"""benchmarks/setups/judge_doubly_robust.py: the doubly robust reading is the truth's on average whatever its model
(the weights correct a model that knows nothing), and the truth's where its model is estimated from plenty."""

from __future__ import annotations

import dataclasses

import numpy as np

from examples.rapids_optimum import logged_rows, played_in_expectation, scored_rivers
from tabular_rl.choice.judge import grid_of, judged
from tabular_rl.choice.members import MemberSpec, fit_member
from tabular_rl.estimate import estimate
from tests.imports import benchmark_module

dr = benchmark_module("judge_doubly_robust")


def setup(episodes: int = 4000):
    fit = logged_rows(episodes, 11, explore=dr.EXPLORE)
    held = logged_rows(episodes, 12, explore=dr.EXPLORE)
    member = fit_member(MemberSpec("threshold", share=0.5), fit, 2, objective="success")
    grid = grid_of([member.edges, np.array([0.3, 0.6, 0.9])])
    scores, slip = scored_rivers(4000, 13)
    return fit, held, member, grid, played_in_expectation(member.decide, scores, slip, 2)


def test_a_model_that_knows_nothing_is_corrected_to_the_truth_by_the_weights():
    fit, held, member, grid, truth = setup()
    model = estimate(fit, grid, objective="success")
    blind = dataclasses.replace(model, success=np.zeros_like(model.success))  # every episode read as a failure
    assert judged(blind, grid, member.decide, 2)[0] == 0.0
    assert abs(dr.doubly_robust(held, blind, grid, member.decide, 2, weighted=False) - truth) < 0.05
    assert abs(dr.doubly_robust(held, blind, grid, member.decide, 2, weighted=True) - truth) < 0.05


def test_with_its_model_estimated_from_plenty_the_reading_is_the_truths():
    fit, held, member, grid, truth = setup()
    model = estimate(fit, grid, objective="success")
    assert abs(judged(model, grid, member.decide, 2)[0] - truth) < 0.02
    assert abs(dr.doubly_robust(held, model, grid, member.decide, 2, weighted=False) - truth) < 0.03

