"""The hierarchical bootstrap against distributions enumerated exactly by hand and by brute force."""

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helper.evaluation.metrics import (
    bootstrap_ci,
    grouped_ci,
    hierarchical_ci,
    hierarchical_weights,
    paired_difference,
    paired_grouped_difference,
    paired_hierarchical_difference,
    weighted_means,
)

SEEDS = ["s1"] * 4 + ["s2"] * 4
GROUPS = ["a", "a", "b", "b"] * 2  # group "a" of s1 and "a" of s2 are two units
RESAMPLES = 40_000


def _frequencies(values, levels, seed=0):
    means = weighted_means(np.asarray(values, dtype=float), hierarchical_weights(levels, RESAMPLES, seed))[:, 0]
    counts = Counter(np.round(means, 9).tolist())
    return {value: count / RESAMPLES for value, count in counts.items()}


def test_only_seeds_differ_gives_the_two_seed_distribution():
    # Seed s1's episodes all fail, s2's all succeed: whatever groups and episodes are drawn inside
    # a seed, a resample's mean is the share of s2 among the two seeds drawn: 0, 1/2, 1 with
    # probabilities 1/4, 1/2, 1/4 (by hand: two fair coins).
    values = [0.0] * 4 + [1.0] * 4
    freq = _frequencies(values, [SEEDS, GROUPS])
    assert set(freq) == {0.0, 0.5, 1.0}
    for value, p in {0.0: 0.25, 0.5: 0.5, 1.0: 0.25}.items():
        assert freq[value] == pytest.approx(p, abs=0.01)
    assert hierarchical_ci(values, [SEEDS, GROUPS], resamples=4000) == (0.0, 1.0)


def test_groups_resampled_before_episodes():
    # One seed, group a = (0, 0), group b = (1, 1). Drawing groups first: mean 0, 1/2, 1 with 1/4,
    # 1/2, 1/4 (by hand). An episode bootstrap of the four episodes would give mean 0 only with
    # (1/2)^4 = 1/16: the intervals differ, which is why groups are a level.
    values = [0.0, 0.0, 1.0, 1.0]
    freq = _frequencies(values, [["s"] * 4, ["a", "a", "b", "b"]])
    assert freq[0.0] == pytest.approx(0.25, abs=0.01) and freq[1.0] == pytest.approx(0.25, abs=0.01)
    flat = _frequencies(values, [["s"] * 4])
    assert flat[0.0] == pytest.approx(1 / 16, abs=0.01)


def _exact_distribution(values):
    """Brute force over every equally likely draw of the 2 seeds x 2 groups x 2 episodes design:
    2 seed picks, each with 2 group picks, each with 2 episode picks (4^1 * 4^2 * 4^4 cases)."""
    cube = np.asarray(values, dtype=float).reshape(2, 2, 2)  # seed, group, episode
    law: Counter = Counter()
    pick2 = list(itertools.product(range(2), repeat=2))  # two draws with replacement out of two
    for seeds in pick2:
        for groups in itertools.product(pick2, repeat=2):  # the groups drawn inside each seed drawn
            for episodes in itertools.product(pick2, repeat=4):  # the episodes inside each group drawn
                total, k = Fraction(0), 0
                for i, s in enumerate(seeds):
                    for j, g in enumerate(groups[i]):
                        for e in episodes[2 * i + j]:
                            total += Fraction(cube[s, g, e])
                            k += 1
                law[total / k] += 1
    n = sum(law.values())
    return {float(value): count / n for value, count in law.items()}


def test_brute_force_enumeration_of_two_seeds_two_groups_two_episodes():
    values = [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]  # distinct per group, so every level matters
    exact = _exact_distribution(values)
    freq = _frequencies(values, [SEEDS, GROUPS], seed=3)
    assert set(freq) <= set(exact)
    for value, p in exact.items():
        assert freq.get(value, 0.0) == pytest.approx(p, abs=0.01), value
    exact_mean = sum(v * p for v, p in exact.items())
    exact_var = sum((v - exact_mean) ** 2 * p for v, p in exact.items())
    draws = weighted_means(np.asarray(values), hierarchical_weights([SEEDS, GROUPS], RESAMPLES, 3))[:, 0]
    assert exact_mean == pytest.approx(0.5)  # unbiased: the sample mean
    assert draws.mean() == pytest.approx(exact_mean, abs=0.005)
    assert draws.var() == pytest.approx(exact_var, rel=0.05)


def test_paired_difference_uses_the_same_draws_for_both_methods():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2, size=8).astype(float)
    # A method that is exactly 0.25 better on every episode: the paired interval is that point,
    # whatever the draws (an unpaired one would carry both methods' variance).
    mean, low, high = paired_hierarchical_difference(base + 0.25, base, [SEEDS, GROUPS], resamples=500)
    assert (mean, low, high) == pytest.approx((0.25, 0.25, 0.25))
    with pytest.raises(ValueError, match="same episodes"):
        paired_hierarchical_difference([1.0], [1.0, 0.0], [["s"]])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=30),
       st.integers(1, 50), st.integers(0, 10_000))
def test_weights_keep_the_hierarchy(units, resamples, seed):
    seeds = [s for s, _ in units]
    groups = [g for _, g in units]
    weights = hierarchical_weights([seeds, groups], resamples, seed)
    assert weights.shape == (resamples, len(units)) and (weights >= 0).all()
    for row in weights:
        # Every resample draws as many seeds as there are; a seed drawn m times brings m times its
        # group count of group draws; a group drawn brings as many episodes as it has.
        assert row.sum() > 0
        seen_seeds = list(dict.fromkeys(seeds))
        per_seed_units = {s: len({g for (t, g) in units if t == s}) for s in seen_seeds}
        per_group_size = Counter(units)
        group_draws = {key: row[[k for k, u in enumerate(units) if u == key]].sum() / per_group_size[key]
                       for key in per_group_size}
        assert all(float(v).is_integer() for v in group_draws.values())
        seed_draws = {s: sum(v for (t, _), v in group_draws.items() if t == s) / per_seed_units[s]
                      for s in seen_seeds}
        assert all(float(v).is_integer() for v in seed_draws.values())
        assert sum(seed_draws.values()) == len(seen_seeds)


# -- the sweep's own intervals: groups, then episodes, where episodes carry a group --------------
TWO_GROUPS = ["a"] * 4 + ["b"] * 4


def test_grouped_ci_resamples_groups_where_episodes_carry_one():
    # Group a's four episodes all fail, group b's all succeed. Groups first: both draws are a with
    # probability 1/4 (mean 0), both b with 1/4 (mean 1), so the 95% interval is [0, 1] exactly.
    # Episodes alone: mean 0 needs all eight draws from a, (1/2)^8 = 1/256, inside the 2.5% tail,
    # so the episode interval is strictly narrower.
    values = [0.0] * 4 + [1.0] * 4
    assert grouped_ci(values, TWO_GROUPS, resamples=4000) == (0.0, 1.0)
    low, high = grouped_ci(values, None, resamples=4000)
    assert 0.0 < low < 0.5 < high < 1.0


def test_grouped_ci_is_the_episode_bootstrap_where_no_group_exists():
    values = [0.0, 1.0, 1.0, 0.0, 1.0]
    assert grouped_ci(values, None, seed=2) == bootstrap_ci(values, seed=2)
    # every episode its own group: no group above the episodes, the old interval unchanged
    assert grouped_ci(values, ["e0", "e1", "e2", "e3", "e4"], seed=2) == bootstrap_ci(values, seed=2)
    mean, low, high = paired_grouped_difference(values, [0.0] * 5, None, seed=2)
    assert (mean, low, high) == paired_difference(values, [0.0] * 5, seed=2)


def test_paired_grouped_difference_resamples_groups_of_the_pair():
    # The helper wins every episode of group a and ties every episode of group b: the difference is
    # 1 on a, 0 on b; over groups the mean is 0, 1/2 or 1 with 1/4, 1/2, 1/4 (two fair coins), so the
    # interval is [0, 1]; a constant difference stays a point whatever the groups.
    helper = [1.0] * 4 + [1.0] * 4
    other = [0.0] * 4 + [1.0] * 4
    assert paired_grouped_difference(helper, other, TWO_GROUPS, resamples=4000) == (0.5, 0.0, 1.0)
    assert paired_grouped_difference([0.5] * 8, [0.25] * 8, TWO_GROUPS) == pytest.approx((0.25, 0.25, 0.25))


def test_sweep_csv_interval_resamples_the_episodes_groups():
    # evaluate_gate's ci_low / ci_high: the arithmetic chain's held-out episodes put in two groups by
    # their outcome under never (known from a first play), so each group is constant and the interval
    # over groups is [0, 1], as by hand above; episodes.csv carries the same groups.
    from types import SimpleNamespace

    from examples import arith_chain
    from helper.gates import simple as B
    from helper.evaluation.play import evaluate_gate

    agent = arith_chain.make_agent()
    first = SimpleNamespace(episodes=lambda: arith_chain.make_episodes("test", 24, 5), base=agent, strong=None)
    _, played, _ = evaluate_gate(first, B.NeverGate, [0], "never", ci_resamples=200)
    outcome = {row["episode_id"]: row["success"] for row in played}
    assert 0 < sum(outcome.values()) < len(outcome)  # both outcomes occur

    def grouped():
        episodes = arith_chain.make_episodes("test", 24, 5)
        for episode in episodes:
            episode.group = "won" if outcome[episode.episode_id] else "lost"
        return episodes

    env = SimpleNamespace(episodes=grouped, base=agent, strong=None)
    rows, per_episode, _ = evaluate_gate(env, B.NeverGate, [0], "never", ci_resamples=4000)
    assert (rows[0]["ci_low"], rows[0]["ci_high"]) == (0.0, 1.0)
    assert {r["group"] for r in per_episode} == {"won", "lost"}


def test_crossed_weights_draw_the_same_groups_for_every_seed():
    from helper.evaluation.metrics import crossed_weights

    seeds = np.repeat(["s0", "s1", "s2"], 12)
    groups = np.tile(np.repeat(["a", "b", "c", "d"], 3), 3)
    weights = crossed_weights(seeds, groups, resamples=500, seed=3)
    for w in weights:
        cell = {(s, g): w[(seeds == s) & (groups == g)].sum() for s in "s0 s1 s2".split() for g in "abcd"}
        seed_total = {s: sum(cell[(s, g)] for g in "abcd") for s in "s0 s1 s2".split()}
        drawn = [s for s in seed_total if seed_total[s]]
        # Every drawn seed has the same groups present and in the same proportions (g_k x 3 sessions each).
        shares = {s: [cell[(s, g)] / seed_total[s] for g in "abcd"] for s in drawn}
        assert all(np.allclose(shares[s], shares[drawn[0]]) for s in drawn)
        assert w.sum() == 3 * 4 * 3  # m_s and g_k each sum to their counts: 3 seeds x 4 groups x 3 sessions


def test_a_group_effect_every_seed_shares_widens_the_crossed_interval():
    from helper.evaluation import metrics as M
    from helper.evaluation.advice_join import paired_difference

    # Three seeds over the same four groups; the helper gains 1 in group "a" alone, in every seed.
    a = {(s, g, "", i): float(g == "a") for s in range(3) for g in "abcd" for i in range(5)}
    b = {key: 0.0 for key in a}
    crossed = paired_difference(a, b, resamples=3000, levels=2)
    # Drawn inside each seed, the three copies of group "a" would count as three independent groups.
    nested = [np.mean([a[key] for key in a]), *M.percentile_interval(
        M.weighted_means(np.array([a[k] for k in sorted(a)]),
                         M.hierarchical_weights([[k[0] for k in sorted(a)], [k[1] for k in sorted(a)]], 3000)), 0.95)]
    assert crossed[0] == pytest.approx(0.25) and nested[0] == pytest.approx(0.25)
    assert crossed[2] - crossed[1] > 1.25 * (nested[2] - nested[1])  # [0, 0.75] against [0, 0.5]
