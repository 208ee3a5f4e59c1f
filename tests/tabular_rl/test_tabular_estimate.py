"""Model estimation: counts, linking rows, smoothing/back-off, refusals, recovery of a known MDP."""

from collections import Counter

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tabular_rl import (
    Discretizer,
    MissingActionError,
    TabularModel,
    estimate,
    extract_transitions,
    simulate,
    solve_exact,
)
from tabular_rl.evaluate import q_values


def random_model(seed, T=4, S=3, concentration=2.0):
    rng = np.random.default_rng(seed)
    return TabularModel(
        transitions=rng.dirichlet(np.full(S + 1, concentration), size=(T, S, 2)),
        rewards=rng.random((T, S, 2)),
        start=np.full(S, 1.0 / S),
    )


def fixed_horizon_model(seed):
    """``random_model`` whose episodes all last exactly its horizon."""
    model = random_model(seed)
    model.transitions[:-1, ..., -1] = 0.0
    model.transitions[-1] = np.eye(model.n_states + 1)[-1]
    model.transitions /= model.transitions.sum(-1, keepdims=True)
    return model


def rows(episodes):
    """Tiny hand-written dataset: episodes = {id: [(score, intervened, reward, done), ...]}."""
    out = []
    for ep, steps in episodes.items():
        for t, (score, a, r, done) in enumerate(steps):
            out.append(
                {
                    "episode_id": ep,
                    "step": t,
                    "intervened": a,
                    "budget_left": 2,
                    "reward": r,
                    "done": done,
                    "success": 1.0,
                    "prm_score": score,
                }
            )
    return pl.DataFrame(out)


def test_counts_match_a_plain_python_count():
    df = simulate(random_model(0), 300, budget=2, behaviour=0.4, seed=3)
    disc = Discretizer(3, "uniform").fit(df["prm_score"])
    model = estimate(df, disc, smoothing=0.0, backoff=0.0)
    # Independent count: walk each episode in Python.
    trans = Counter()
    for ep in df.partition_by("episode_id"):
        ep = ep.sort("step")
        s = ep["state"].to_list()
        for i, (t, a, done) in enumerate(zip(ep["step"], ep["intervened"], ep["done"])):
            trans[(t, s[i], int(a), 4 if done else s[i + 1])] += 1  # 4 = terminal
    expected = np.zeros_like(model.next_counts)
    for key, n in trans.items():
        expected[key] = n
    np.testing.assert_array_equal(model.next_counts, expected)
    assert model.counts.sum() == df.height
    frame = model.counts_frame()
    assert frame["n"].sum() == df.height and frame.height == model.horizon * model.n_states * 2
    # With no smoothing the estimate is the empirical frequency wherever there is data.
    seen = model.counts > 0
    np.testing.assert_allclose(model.transitions[seen], (expected / np.maximum(model.counts[..., None], 1))[seen])
    step0 = df.filter(pl.col("step") == 0)["state"].to_numpy()
    np.testing.assert_allclose(model.start[:3], np.bincount(step0, minlength=3) / step0.size)


def test_row_order_does_not_matter():
    df = simulate(random_model(1), 200, budget=2, behaviour=0.5, seed=4)
    disc = Discretizer(3, "uniform").fit(df["prm_score"])
    a = estimate(df, disc)
    b = estimate(df.sample(fraction=1.0, shuffle=True, seed=7), disc)
    np.testing.assert_array_equal(a.next_counts, b.next_counts)
    np.testing.assert_allclose(a.rewards, b.rewards)


def test_backoff_to_the_step_pooled_estimate():
    # State of score 0.1 (bin 0): step 0 -> bin 1 twice under base; step 1 -> end, never intervened.
    df = rows(
        {
            "a": [(0.1, False, 1.0, False), (0.9, False, 0.0, True)],
            "b": [(0.1, False, 3.0, False), (0.9, True, 0.0, True)],
            "c": [(0.1, True, 0.0, False), (0.1, False, 0.0, True)],
        }
    )
    disc = Discretizer(2, "uniform").fit(df["prm_score"])
    m = estimate(df, disc, smoothing=1.0, backoff=2.0)
    S = 3  # two bins + unknown
    # Ending backs off to the step's end rate: step 0 ends 0 of 3 rows, step 1 all 3; overall 1/2.
    hazard0, hazard1 = (0 + 1.0 * 0.5) / (3 + 1.0), (3 + 1.0 * 0.5) / (3 + 1.0)
    # Base in bin 0 at step 0: 2 rows, neither ends; both move to bin 1, the only moves of (bin 0, base).
    # Its relative risk counts steps before the last only (the last step's end is the horizon's):
    # no end where its steps' rates expect 2 * hazard0.
    risk = (0 + 1.0) / (2 * hazard0 + 1.0)
    end = (0 + 2.0 * hazard0 * risk) / (2 + 2.0)
    pooled = (np.array([0, 2, 0]) + 1.0) / (2 + 1.0 * S)
    moves = (np.array([0, 2, 0]) + 2.0 * pooled) / (2 + 2.0)
    np.testing.assert_allclose(m.transitions[0, 0, 0], [*((1 - end) * moves), end])
    # Intervene in bin 1 at step 0 never happened and never moved: the prior end rate, uniform moves.
    prior = hazard0 * (0 + 1.0) / (0 + 1.0)
    np.testing.assert_allclose(m.transitions[0, 1, 1], [*np.full(S, (1 - prior) / S), prior])
    # Mean reward: base in bin 0 at step 0 has two continuing rows, (1 + 3) / 2, shrunk towards the pooled mean
    # of (bin 0, base)'s continuing rows (the same two) and that towards the base action's continuing rows
    # (a0, b0); its ending rows (none here; c1 pooled over steps, paying 0) weigh in by its end probability.
    global_continuing = (1 + 3) / 2
    pooled_r = (4.0 + 1.0 * global_continuing) / (2 + 1.0)
    continuing = (4.0 + 2.0 * pooled_r) / (2 + 2.0)
    assert m.rewards[0, 0, 0] == pytest.approx((1 - end) * continuing + end * 0.0)
    # The last step always ends the episode.
    np.testing.assert_array_equal(m.transitions[-1, ..., -1], 1.0)


def test_nan_scores_and_truncated_episodes():
    df = rows(
        {
            "a": [(np.nan, False, 1.0, False), (0.9, True, 0.0, True)],
            "b": [(0.2, True, 1.0, False)],  # not done and no next row: truncated, treated as terminal
        }
    )
    disc = Discretizer(2, "uniform").fit(df["prm_score"])
    tr = extract_transitions(df, disc)
    assert tr.n_truncated == 1
    assert tr.state.tolist() == [2, 1, 0] and tr.next_state.tolist() == [1, 3, 3]
    assert tr.success.tolist() == [0.0, 1.0, 1.0]  # success credited once, at each episode's last row


def test_refuses_data_without_interventions():
    df = simulate(random_model(2), 50, budget=2, behaviour=0.0, seed=0)
    disc = Discretizer(3, "uniform").fit(df["prm_score"])
    with pytest.raises(MissingActionError) as err:
        estimate(df, disc)
    msg = str(err.value)
    assert "intervened=True" in msg and "explore_p > 0" in msg
    assert "collect-offline-trajectories --explore-p 0.1 0.3 0.5" in msg


def test_refuses_data_without_base_actions():
    df = simulate(random_model(2), 50, budget=10, behaviour=1.0, seed=0)
    disc = Discretizer(3, "uniform").fit(df["prm_score"])
    with pytest.raises(MissingActionError, match="intervened=False.*explore_p < 1"):
        estimate(df, disc)


def test_bad_rows_are_refused_with_the_episode_named():
    disc = Discretizer(2, "uniform").fit([0.5])
    early_done = rows({"e7": [(0.1, False, 1.0, True), (0.9, True, 0.0, True)]})
    with pytest.raises(ValueError, match="episode_id='e7' has done=True at step=0"):
        estimate(early_done, disc)
    dup = pl.concat([rows({"e3": [(0.1, True, 1.0, True)]})] * 2)
    with pytest.raises(ValueError, match="episode_id='e3' has two rows with step=0"):
        estimate(dup, disc)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['prm_score'\]"):
        estimate(early_done.drop("prm_score"), disc)


def test_estimation_recovers_the_true_optimal_policy():
    # Seed 10 gives a model whose optimal actions all win by >= 0.18 (checked below), so sampling
    # error cannot flip them once every (step, state, action) has a few thousand rows.
    true = random_model(10)
    C = 2
    v = np.zeros((3, C + 1))
    for t in range(true.horizon - 1, -1, -1):
        q0, q1 = q_values(true, t, v, hard_budget=True)
        assert np.abs(q1 - q0)[:, 1:].min() > 0.18
        v = np.maximum(q0, q1)
    df = simulate(true, 20_000, budget=3, behaviour=0.5, seed=1, reward_noise=0.3)
    disc = Discretizer(3, "uniform").fit(df["prm_score"], df["step"])
    est = estimate(df, disc)
    assert est.counts[:, :3].min() > 1000
    got, want = solve_exact(est, C), solve_exact(true, C)
    np.testing.assert_array_equal(got.policy[:, :3], want.policy)
    assert got.expected_return == pytest.approx(want.expected_return, abs=0.03)


def test_step_buckets_split_states_by_step():
    df = simulate(random_model(3, T=6), 500, budget=2, behaviour=0.5, seed=5)
    disc = Discretizer(3, "uniform", step_buckets=2).fit(df["prm_score"], df["step"])
    m = estimate(df, disc)
    assert m.n_states == 8 and m.horizon == 6
    visits = m.counts.sum(-1)  # (step, state)
    _, bucket = disc.split(np.arange(8))
    for t in range(6):
        # Steps 0-2 only visit bucket-0 states, steps 3-5 only bucket-1 states.
        assert visits[t, bucket != t // 3].sum() == 0 and visits[t, bucket == t // 3].sum() > 0
    # Back-off pools over steps, so a bucket-0 state's pooled estimate only sees steps 0-2.
    assert m.next_counts[3:, bucket == 0].sum() == 0


def test_a_fixed_horizon_never_ends_early():
    # Every episode lasts exactly 4 steps. Thin cells back off, but the last step's certain end
    # must not leak into earlier steps (it would make the solver spend its budget early).
    model = fixed_horizon_model(2)
    fixed = simulate(model, 40, budget=2, behaviour=0.5, seed=2)
    assert fixed.group_by("episode_id").len()["len"].min() == model.horizon
    disc = Discretizer(3, "uniform").fit(fixed["prm_score"])
    for backoff in (5.0, "auto"):
        m = estimate(fixed, disc, smoothing=1.0, backoff=backoff)
        rows_per_step = fixed.filter(pl.col("step") == 0).height
        # Only the smoothing prior (1 pseudo-row at the overall end rate 1/4) can put mass there,
        # scaled by a relative risk near 1.
        assert m.transitions[:-1, ..., -1].max() <= 1.5 * 0.25 / (rows_per_step + 1)
        np.testing.assert_array_equal(m.transitions[-1, ..., -1], 1.0)


def test_auto_backoff_pools_alike_steps_and_separates_different_ones():
    T, S = 6, 3
    rng = np.random.default_rng(0)
    base = rng.random((1, S, 2))
    alike = TabularModel(
        transitions=np.broadcast_to(rng.dirichlet(np.full(S + 1, 4.0), size=(1, S, 2)), (T, S, 2, S + 1)).copy(),
        rewards=np.broadcast_to(base, (T, S, 2)).copy(),
        start=np.full(S, 1.0 / S),
    )
    different = TabularModel(
        transitions=alike.transitions,
        rewards=np.where(np.arange(T)[:, None, None] % 2 == 0, 0.0, 1.0) * np.ones((T, S, 2)),
        start=alike.start,
    )
    disc = Discretizer(S, "uniform")
    pooled = estimate(simulate(alike, 4000, budget=2, behaviour=0.5, seed=1, reward_noise=0.3),
                      disc.fit(np.linspace(0, 1, 10)), backoff="auto")
    split = estimate(simulate(different, 4000, budget=2, behaviour=0.5, seed=1, reward_noise=0.3),
                     disc, backoff="auto")
    assert pooled.backoff > 1000 and split.backoff < 1.0
    # Per-step means 0 and 1 with noise 0.3: the weight is about noise variance / spread variance.
    assert split.backoff == pytest.approx(0.3**2 / 0.25, rel=0.5)
    with pytest.raises(ValueError, match="backoff='often'"):
        estimate(simulate(alike, 10, budget=1, behaviour=0.5, seed=1), disc, backoff="often")


def test_auto_backoff_weight_matches_the_textbook_moments():
    # One group, two cells (steps) of sizes 2 and 3, scalar outcomes: one-way ANOVA by hand.
    from tabular_rl.estimate import pooling_weight

    a, b = np.array([1.0, 3.0]), np.array([6.0, 8.0, 10.0])
    sums = np.zeros((2, 1, 1, 1))
    sums[0, 0, 0, 0], sums[1, 0, 0, 0] = a.sum(), b.sum()
    squares = np.array([(a**2).sum(), (b**2).sum()]).reshape(2, 1, 1)
    counts = np.array([2.0, 3.0]).reshape(2, 1, 1)
    grand = np.concatenate([a, b]).mean()
    msw = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / (5 - 2)
    msb = (2 * (a.mean() - grand) ** 2 + 3 * (b.mean() - grand) ** 2) / (2 - 1)
    n0 = (5 - (4 + 9) / 5) / (2 - 1)
    assert pooling_weight(sums, squares, counts) == pytest.approx(msw / ((msb - msw) / n0))


def test_states_that_end_episodes_early_keep_their_end_rate():
    # Bin 1 ends the episode at any step (a win); bin 0 never does before the horizon. Per-step
    # cells are thin, but the proportional-hazards prior keeps the contrast.
    rng = np.random.default_rng(3)
    episodes = {}
    for e in range(60):
        steps = []
        for t in range(5):
            score = float(rng.choice([0.2, 0.8]))
            done = score > 0.5 or t == 4
            steps.append((score, bool(rng.random() < 0.3), 0.0, done))
            if done:
                break
        episodes[f"e{e}"] = steps
    df = rows(episodes)
    disc = Discretizer(2, "uniform").fit(df["prm_score"])
    m = estimate(df, disc, backoff=20.0)  # heavy back-off: the prior decides
    assert m.transitions[:-1, 1, :, -1].min() > 0.8
    assert m.transitions[:-1, 0, :, -1].max() < 0.1


def test_success_that_is_the_mean_reward_follows_the_policy():
    # ProductQA-like: fixed horizon, success = share of steps rewarded. Expected success must be the
    # policy's expected return over the horizon at every budget (crediting the logged episodes'
    # success at their last state instead ignores the policy's earlier choices).
    model = fixed_horizon_model(4)
    df = simulate(model, 400, budget=2, behaviour=0.4, seed=4)
    df = df.with_columns(pl.col("reward").mean().over("episode_id").alias("success"))
    m = estimate(df, Discretizer(3, "uniform").fit(df["prm_score"]))
    for budget in (0, 1, 2):
        sol = solve_exact(m, budget)
        assert sol.expected_success == pytest.approx(sol.expected_return / model.horizon, rel=1e-9)


def test_an_action_that_never_ends_early_is_not_charged_the_horizons_ends():
    # Five steps; the risky state ends the episode 3 times in 4 under base, an intervention never
    # ends it before the horizon. Before the fix the last step's certain ends counted in the
    # intervention's relative risk and gave it an early end rate of about 0.1.
    from examples.plain_cue_optimum import true_model

    model = true_model(5)
    data = simulate(model, 400, budget=5, behaviour=0.4, seed=4)
    disc = Discretizer(3, "uniform").fit(data["prm_score"])  # simulate's scores fall in their state's bin
    m = estimate(data, disc, smoothing=1.0)
    assert m.transitions[:-1, :3, 1, -1].max() < 0.03  # the fourth state is the unscored one, never seen
    assert m.transitions[:-1, 2, 0, -1].min() > 0.5  # "dangerous" under base (truth 3/4) ends most episodes


def end_paid_rows(seed: int, episodes: int, longest: int) -> pl.DataFrame:
    """Episodes of random lengths whose success (0 or 1) is credited only at their last row, interventions at
    random: the shape of TextWorld's and the plug-ins' data."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(episodes):
        length = int(rng.integers(1, longest + 1))
        won = float(rng.random() < 0.6)
        for t in range(length):
            last = t == length - 1
            out.append({"episode_id": f"e{e}", "step": t, "intervened": bool(rng.random() < 0.4), "budget_left": 3,
                        "reward": won if last else 0.0, "done": last, "success": won,
                        "prm_score": float(rng.random())})
    return pl.DataFrame(out)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), episodes=st.integers(3, 40), longest=st.integers(1, 15),
       bins=st.integers(1, 6), budget=st.integers(0, 4))
def test_expected_success_is_a_probability_when_success_is_paid_at_the_end(seed, episodes, longest, bins, budget):
    # A step that never ends an episode must not borrow the last step's credit: every value a solve reports
    # (and every value it compares to decide) lies in [0, 1].
    df = end_paid_rows(seed, episodes, longest)
    if df["intervened"].all() or not df["intervened"].any():
        return
    model = estimate(df, Discretizer(bins).fit(df["prm_score"], df["step"]), objective="success")
    assert model.success.max() <= 1.0 + 1e-9 and model.rewards.max() <= 1.0 + 1e-9
    solution = solve_exact(model, budget)
    assert -1e-9 <= solution.expected_success <= 1.0 + 1e-9
    assert solution.values.max() <= 1.0 + 1e-9


def test_a_credit_paid_at_the_end_reaches_only_the_steps_that_end():
    # Two-step episodes, each ending at step 1 with success 1. Step 0 never ends an episode, so it is credited
    # success only as often as the model's (prior) end rate there, whatever the pooling over steps.
    df = rows({f"e{i}": [(0.5, i % 2 == 0, 0.0, False), (0.5, i % 3 == 0, 1.0, True)] for i in range(12)})
    model = estimate(df, Discretizer(2).fit(df["prm_score"], df["step"]), objective="success")
    assert np.allclose(model.rewards[0], model.transitions[0, ..., -1])
    assert solve_exact(model, 1).expected_success == pytest.approx(1.0)
