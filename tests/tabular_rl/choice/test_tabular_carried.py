"""The judge that remembers a failed step: a chain whose episode succeeds only if every step does."""

import itertools

import numpy as np
import polars as pl
import pytest

from tabular_rl.choice.carried import CarriedFailure, carries_failure
from tabular_rl.choice.judge import grid_of, judge_model, judged
from tabular_rl.choice.members import MemberSpec, threshold_member
from carried_chains import HORIZON, RISKY, SLIP, chain_rows

def true_success(budget: int) -> float:
    """Exact success of "help every risky step while budget lasts", by enumerating the risk patterns."""
    total = 0.0
    for pattern in itertools.product([False, True], repeat=HORIZON):
        weight = np.prod([RISKY if r else 1 - RISKY for r in pattern])
        unhelped = max(sum(pattern) - budget, 0)
        total += weight * (1 - SLIP) ** unhelped
    return float(total)


def help_risky(step, score, budget_left):
    return np.asarray(score) < 0.5


def test_only_a_failure_carried_to_the_end_is_recognised():
    assert carries_failure(chain_rows(0, 200))
    assert not carries_failure(chain_rows(0, 200, carried=False))  # success the mean reward: steps are separate
    ended = chain_rows(0, 200).filter(~((pl.col("reward") < 0.5).cum_sum().over("episode_id", order_by="step")
                                        - (pl.col("reward") < 0.5).cast(pl.Int64) > 0))
    ended = ended.with_columns(done=pl.col("step") == pl.col("step").max().over("episode_id"))
    assert not carries_failure(ended)  # a failure that ends the episode is seen by any judge
    # Two slips that cancel out (a chain's +10 then -10): one such episode in a hundred does not turn the memory off.
    rows = chain_rows(0, 200)
    lucky = rows.filter(pl.col("reward") < 0.5)["episode_id"][0]
    assert carries_failure(rows.with_columns(success=pl.when(pl.col("episode_id") == lucky).then(1.0)
                                             .otherwise(pl.col("success"))))


@pytest.mark.parametrize("budget", [1, 2])
def test_the_judge_that_remembers_reads_the_true_success_and_the_blind_one_does_not(budget):
    held, fitted = chain_rows(1, 4000), chain_rows(2, 4000)
    grid = grid_of([[0.5]])
    blind = judged(judge_model(held, fitted, grid), grid, help_risky, budget)[0]
    carried = CarriedFailure.of(held, fitted)
    assert carried is not None
    seeing = judged(judge_model(carried.rows(held, grid), carried.rows(fitted, grid), carried.grid(grid)),
                    carried.grid(grid), carried.decide(help_risky, grid), budget)[0]
    truth = true_success(budget)
    assert abs(seeing - truth) < 0.02
    assert abs(blind - truth) > 0.05  # the blind judge credits an early rescue with nothing


def test_a_member_decides_on_each_cell_as_on_the_scores_in_it():
    rows = chain_rows(3, 50).with_columns(prm_score=pl.col("prm_score") + pl.Series(np.linspace(-0.1, 0.1, 200)))
    carried = CarriedFailure.of(rows)
    member = threshold_member(MemberSpec("threshold", share=0.5), rows["prm_score"].to_numpy(), HORIZON, 2)
    grid = grid_of([[0.15, 0.5, 0.85], member.edges])
    moved = carried.rows(rows, grid)
    assert (moved["prm_score"] >= grid.bins).sum() > 0  # some rows follow a failed step
    steps, left = rows["step"].to_numpy(), np.full(rows.height, 2)
    assert np.array_equal(carried.decide(member.decide, grid)(steps, moved["prm_score"].to_numpy(), left),
                          member.decide(steps, rows["prm_score"].to_numpy(), left))
    assert carried.grid(grid).n_states == 2 * grid.bins + 1  # live cells, the same after a failure, unknown
