"""Supervised bins: the splits of a one-dimensional regression tree on score -> outcome."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.tree import DecisionTreeRegressor

from helper.solve.solve_command import SolveConfig, run
from tabular_rl import Discretizer
from tabular_rl.supervised_bins import supervised_edges
from trajectories.shards import mark_complete


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 8), st.integers(1, 20))
def test_edges_equal_a_cart_tree_with_as_many_leaves(seed, bins, min_leaf):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 300))
    # Scores on a 1/256 grid (exact in float32, which the tree computes in), outcomes with a step in their rate.
    x = rng.integers(0, 256, n) / 256
    y = (rng.random(n) < np.where(x < 0.4, 0.2, np.where(x < 0.8, 0.6, 0.95))).astype(float) + rng.normal(0, 0.01, n)
    tree = DecisionTreeRegressor(max_leaf_nodes=bins, min_samples_leaf=min_leaf, random_state=0).fit(x[:, None], y)
    expected = np.sort(tree.tree_.threshold[tree.tree_.feature >= 0])
    assert supervised_edges(x, y, bins, min_leaf) == pytest.approx(expected, abs=1e-6)


def test_edges_fall_between_clusters_where_equal_count_bins_cut_through_one():
    # Three clusters of scores as a PRM gives a risky, a middling and a safe step (a quarter, a quarter, half
    # the rows), with step-success rates 0.25 / 0.75 / 1.
    rng = np.random.default_rng(0)
    sizes, centres, rates = (250, 250, 500), (0.25, 0.75, 0.99), (0.25, 0.75, 1.0)
    x = np.concatenate([rng.normal(c, 0.04 if c < 0.9 else 0.003, k) for c, k in zip(centres, sizes)])
    y = np.concatenate([rng.random(k) < r for k, r in zip(sizes, rates)]).astype(float)
    cluster = np.repeat([0, 1, 2], sizes)

    def mixed(bins):  # rows in a bin whose other rows mostly come from another cluster
        return sum(int(np.sum(cluster[bins == b] != np.bincount(cluster[bins == b]).argmax())) for b in np.unique(bins))

    # Equal-count edges sit at the 1/6 and 2/6 quantiles, inside the first two clusters: 83 rows share a bin
    # with a cluster of another rate. The tree's edge between them moves a few rows into the noise (14 here).
    assert mixed(Discretizer(6, "quantile").fit(x).transform(x)) == 83
    assert mixed(Discretizer(6, "supervised").fit(x, targets=y).transform(x)) <= 20
    # Rows without a target (NaN: an intervention's step) are left out of the tree, not of the bins.
    y_some = y.copy()
    y_some[::3] = np.nan
    assert np.isfinite(Discretizer(6, "supervised").fit(x, targets=y_some).edges_).sum() >= 2


def test_a_constant_outcome_leaves_one_bin_and_the_state_ids_stable(tmp_path):
    disc = Discretizer(4, "supervised").fit(np.linspace(0, 1, 50), targets=np.ones(50))
    assert disc.edges_.shape == (3,) and set(disc.transform(np.linspace(0, 1, 50))) == {0}
    disc.save(tmp_path / "d.json")
    loaded = Discretizer.load(tmp_path / "d.json")
    assert loaded.binning == "supervised" and (loaded.transform([0.3, np.nan]) == [0, 4]).all()


def test_supervised_binning_needs_targets():
    with pytest.raises(ValueError, match="supervised' needs targets"):
        Discretizer(4, "supervised").fit(np.linspace(0, 1, 50))
    with pytest.raises(ValueError, match="targets: 3 values for 50 scores"):
        Discretizer(4, "supervised").fit(np.linspace(0, 1, 50), targets=[1.0, 0.0, 1.0])


def test_the_solve_cuts_supervised_bins_on_the_agents_own_rewards(tmp_path):
    import polars as pl

    # One step per episode: the agent's reward is 1 above a score of 0.5 and 0 below; an intervention always
    # earns 1, which must not blur the edge (those rows carry the helper's reward, not the agent's).
    rng = np.random.default_rng(1)
    n = 400
    score = rng.random(n)
    intervened = rng.random(n) < 0.5
    reward = np.where(intervened, 1.0, (score > 0.5).astype(float))
    data = tmp_path / "trajectories"
    data.mkdir()
    pl.DataFrame({"episode_id": [f"e{i}" for i in range(n)], "step": [0] * n, "intervened": intervened,
                  "budget_left": [1] * n, "reward": reward, "done": [True] * n, "success": reward,
                  "prm_score": score}).write_parquet(data / "shard-000.parquet")
    mark_complete(data)
    run(SolveConfig(data=str(data), budgets=[1], bins=4, binning="supervised", out=str(tmp_path / "solve")))
    edges = Discretizer.load(tmp_path / "solve" / "discretizer.json").edges_
    assert np.isclose(edges, 0.5, atol=0.01).any()
