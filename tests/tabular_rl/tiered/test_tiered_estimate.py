"""Estimating a tiered model from rows that name the help they called."""

import numpy as np
import polars as pl
import pytest
from tiered_models import random_tiered_model

from tabular_rl import Discretizer, MissingActionError, TabularModel, estimate, simulate
from tabular_rl.tiered import (
    Resources,
    estimate_tiered,
    evaluate_table,
    help_kind_actions,
    simulate_tiered,
    solve_tiered_exact,
)


def test_one_kind_rows_give_the_two_action_estimate_exactly():
    rng = np.random.default_rng(7)
    T, S = 5, 3
    true = TabularModel(transitions=rng.dirichlet(np.ones(S + 1), size=(T, S, 2)), rewards=rng.random((T, S, 2)),
                        start=np.full(S, 1 / S))
    rows = simulate(true, 1500, budget=T, behaviour=0.4, seed=1, reward_noise=0.3)
    rows = rows.with_columns(help_kind=pl.when(pl.col("intervened")).then(pl.lit("human")).otherwise(None))
    disc = Discretizer(S, "uniform").fit(rows["prm_score"], rows["step"])
    two = estimate(rows, disc)
    tiered = estimate_tiered(rows, disc, kinds=("human",))
    for name in ("transitions", "rewards", "start", "counts"):
        np.testing.assert_array_equal(getattr(tiered, name), getattr(two, name))
    assert (tiered.backoff, tiered.transition_backoff) == (two.backoff, two.transition_backoff)


def test_enough_random_calls_of_every_kind_solve_to_near_the_true_optimum():
    true = random_tiered_model(11, 5, 3, 3)
    true.rewards[..., 3] += 0.4  # the dear kind is worth calling somewhere, so the kinds differ
    resources = Resources.of((1, 2, 3), 4, caps=(None, None, 1), horizon=5)
    rows = simulate_tiered(true, resources, 20_000, behaviour=0.6, seed=3)
    disc = Discretizer(3, "uniform").fit(rows["prm_score"], rows["step"])
    model = estimate_tiered(rows, disc, kinds=true.kinds)
    # Where a cell has many rows, the estimate is the truth within sampling error (before the last step,
    # where the horizon ends every episode whatever the random table says).
    well_seen = model.counts[:-1, :3] >= 400
    gap = np.abs(model.transitions[:-1, :3][..., [0, 1, 2, 4]] - true.transitions[:-1])[well_seen]
    assert gap.max() < 0.1
    solved = solve_tiered_exact(model, resources)
    played = evaluate_table(true, resources, solved.tables[0][:, :3])  # the unknown-score state is never reached
    best = solve_tiered_exact(true, resources)
    assert played.expected_return >= 0.98 * best.expected_return
    assert played.expected_return <= best.expected_return + 1e-12


def test_help_kind_is_read_as_names_or_indices_with_empty_rows_the_agent():
    kinds = ("compute", "human")
    names = pl.DataFrame({"help_kind": [None, "human", "", "compute"], "intervened": [False, True, False, True]})
    np.testing.assert_array_equal(help_kind_actions(names, kinds), [0, 2, 0, 1])
    indices = pl.DataFrame({"help_kind": [0, 2, None, 1]})
    np.testing.assert_array_equal(help_kind_actions(indices, kinds), [0, 2, 0, 1])
    nothing = pl.DataFrame({"help_kind": [None, None]})
    np.testing.assert_array_equal(help_kind_actions(nothing, kinds), [0, 0])


@pytest.mark.parametrize("frame, message", [
    ({"help_kind": ["oracle", None]}, "not among"),
    ({"help_kind": [3, 0]}, "kinds are 1 .. 2"),
    ({"help_kind": [None, "human"], "intervened": [True, True]}, "exactly when it intervened"),
    ({"step": [0, 1]}, "no 'help_kind' column"),
])
def test_rows_that_do_not_say_their_help_plainly_are_refused(frame, message):
    with pytest.raises(ValueError, match=message):
        help_kind_actions(pl.DataFrame(frame), ("compute", "human"))


def test_a_kind_no_row_called_cannot_be_estimated():
    true = random_tiered_model(0, 3, 2, 2)
    rows = simulate_tiered(true, Resources.of((1, 1), 3), 300, behaviour=0.5, seed=0)
    only_first = rows.with_columns(
        help_kind=pl.when(pl.col("help_kind") == "kind2").then(None).otherwise(pl.col("help_kind")),
        intervened=pl.col("help_kind") == "kind1")
    disc = Discretizer(2, "uniform").fit(rows["prm_score"], rows["step"])
    with pytest.raises(MissingActionError, match="kind 'kind2'"):
        estimate_tiered(only_first, disc, kinds=true.kinds)
