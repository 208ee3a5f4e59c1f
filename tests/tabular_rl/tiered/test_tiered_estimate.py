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


def separate_questions(seed: int, episodes: int = 400, steps: int = 3) -> pl.DataFrame:
    """Rows of separate questions deciding after the proposal: the agent's own outcome logged on every row. The
    ``echo`` kind answers as the agent would (its outcome is the proposal's); ``human`` is always right. Help is
    called at random, more often on easy questions (where the agent is right), so a kind's rows alone read better
    than the agent's rows in the same cell."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(episodes):
        for t in range(steps):
            score = rng.random()
            right = float(rng.random() < 0.3 + 0.5 * score)
            kind = rng.choice(["", "echo", "human"], p=[0.5, 0.25, 0.25] if right else [0.8, 0.1, 0.1])
            reward = 1.0 if kind == "human" else right
            rows.append({"episode_id": f"e{e}", "step": t, "prm_score": score, "help_kind": kind or None,
                         "intervened": bool(kind), "reward": reward, "proposal_reward": right,
                         "done": t == steps - 1, "budget_left": 9})
    frame = pl.DataFrame(rows)
    return frame.with_columns(pl.col("reward").mean().over("episode_id").alias("success"))


def test_paired_outcomes_read_the_agent_on_every_row_and_each_kind_by_its_control_variate():
    from tabular_rl.tiered.estimate import PAIRED_PRIOR

    rows = separate_questions(0)
    rows = rows.with_columns(noisy=pl.Series(np.random.default_rng(5).random(rows.height)))
    # A third kind, right where the agent is right and on 60% of the rest: its slope on the agent lies inside (0, 1).
    rows = rows.with_columns(help_kind=pl.when((pl.col("help_kind") == "echo") & (pl.col("noisy") < 0.5))
                             .then(pl.lit("mixed")).otherwise(pl.col("help_kind")))
    rows = rows.with_columns(reward=pl.when(pl.col("help_kind") == "mixed")
                             .then(pl.max_horizontal("proposal_reward", (pl.col("noisy") < 0.3).cast(pl.Float64)))
                             .otherwise(pl.col("reward")))
    rows = rows.with_columns(pl.col("reward").mean().over("episode_id").alias("success"))
    kinds = ("echo", "human", "mixed")
    disc = Discretizer(2, "uniform").fit(rows["prm_score"], rows["step"])
    plain = estimate_tiered(rows, disc, kinds=kinds, objective="success", paired=False)
    model = estimate_tiered(rows, disc, kinds=kinds, objective="success")  # auto: the rows allow it
    state = disc.transform(rows["prm_score"].to_numpy(), rows["step"].to_numpy())
    step = rows["step"].to_numpy()
    own, reward = rows["proposal_reward"].to_numpy() / 3, rows["reward"].to_numpy() / 3  # a third of the success each
    kind = rows["help_kind"].fill_null("").to_numpy()

    def shrunk(value, among, t, s):
        cell = among & (step == t) & (state == s)
        return (value[cell].sum() + PAIRED_PRIOR * value[among].mean()) / (cell.sum() + PAIRED_PRIOR)

    every = np.ones(rows.height, bool)
    slopes = {}
    for name in kinds:
        mine = kind == name
        slopes[name] = min(max(np.cov(reward[mine], own[mine], bias=True)[0, 1] / np.var(own[mine]), 0.0), 1.0)
    assert slopes["echo"] == pytest.approx(1.0) and slopes["human"] == pytest.approx(0.0, abs=1e-12)
    assert 0.1 < slopes["mixed"] < 0.9
    for t in range(3):
        for s in range(2):
            agent = shrunk(own, every, t, s)  # the agent's own outcome on every row of the cell
            assert model.rewards[t, s, 0] == pytest.approx(agent, abs=1e-12)
            for k, name in enumerate(kinds, start=1):
                mine = kind == name
                expected = shrunk(reward - slopes[name] * own, mine, t, s) + slopes[name] * agent
                assert model.rewards[t, s, k] == pytest.approx(expected, abs=1e-12)
                assert model.success[t, s, k] == pytest.approx(expected, abs=1e-12)
            assert model.rewards[t, s, 1] == pytest.approx(model.rewards[t, s, 0], abs=1e-15)  # the echo: the agent
            assert model.rewards[t, s, 2] == pytest.approx(1 / 3, abs=1e-12)  # the human: always right
    weights = plain.counts[..., None].astype(float)  # every action's next state: the cell's, pooled over actions
    seen = weights.sum(axis=2)[..., 0] > 0  # the unknown state holds no row
    pooled = (weights * plain.transitions).sum(axis=2)[seen] / weights.sum(axis=2)[seen]
    for a in range(4):
        np.testing.assert_allclose(model.transitions[:, :, a][seen], pooled, atol=1e-12)


def test_a_help_that_answers_as_the_agent_does_is_never_bought_with_paired_gains():
    rows = separate_questions(1)
    disc = Discretizer(2, "uniform").fit(rows["prm_score"], rows["step"])
    for paired, echo_calls in ((False, "some"), (True, "none")):
        model = estimate_tiered(rows, disc, kinds=("echo", "human"), objective="success", paired=paired)
        for budget in (1, 2, 4):
            solution = solve_tiered_exact(model, Resources.of((1, 4), budget, horizon=3))
            calls = solution.expected_calls[1]
            if echo_calls == "none":
                assert calls == 0, budget
            elif budget == 1:  # read from its own rows alone, the echo looks better than the agent
                assert calls > 0
