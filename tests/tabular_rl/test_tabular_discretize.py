"""Discretizer: bins, NaN / out-of-range behaviour, step buckets, save/load."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tabular_rl import Discretizer


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=20, max_size=400, unique=True),
    st.integers(1, 12),
)
def test_quantile_bins_are_balanced(values, bins):
    x = np.array(values)
    states = Discretizer(bins, "quantile").fit(x).transform(x)
    counts = np.bincount(states, minlength=bins + 1)
    assert counts[bins] == 0  # no NaN, so the unknown state is empty
    # Linear-interpolated quantile edges split n distinct values to within 2 rows of n / bins.
    assert np.all(np.abs(counts[:bins] - len(x) / bins) <= 2)


def test_uniform_bins_on_unit_interval_and_edges_go_up():
    d = Discretizer(4, "uniform").fit(np.array([0.3, 0.4]))
    np.testing.assert_allclose(d.edges_, [0.25, 0.5, 0.75])
    x = np.array([0.0, 0.1, 0.25, 0.49, 0.5, 0.99, 1.0])
    assert d.transform(x).tolist() == [0, 0, 1, 1, 2, 3, 3]


def test_uniform_fitted_range():
    d = Discretizer(2, "uniform", score_range=None).fit(np.array([10.0, 14.0, 20.0]))
    np.testing.assert_allclose(d.edges_, [15.0])


@pytest.mark.parametrize("binning", ["quantile", "uniform"])
def test_out_of_range_clips_to_edge_bins_and_nan_is_unknown(binning):
    rng = np.random.default_rng(0)
    d = Discretizer(5, binning).fit(rng.random(1000))
    states = d.transform(np.array([-3.0, -np.inf, 7.0, np.inf, np.nan]))
    assert states.tolist() == [0, 0, 4, 4, 5]
    assert d.unknown_bin == 5 and d.n_states == 6


def test_step_buckets_layout_and_clipping():
    d = Discretizer(3, "uniform", step_buckets=2).fit(np.array([0.1, 0.9]), steps=np.arange(10))
    assert d.horizon_ == 10 and d.n_states == 8
    scores = np.array([0.1, 0.1, 0.9, np.nan, 0.5, 0.5])
    steps = np.array([0, 4, 5, 9, 42, -1])
    states = d.transform(scores, steps)
    # bucket 0 = steps 0..4, bucket 1 = 5..9 (and beyond); state = bucket * (bins + 1) + score bin.
    assert states.tolist() == [0, 0, 4 + 2, 4 + 3, 4 + 1, 1]
    score_bin, bucket = d.split(states)
    assert score_bin.tolist() == [0, 0, 2, 3, 1, 1] and bucket.tolist() == [0, 0, 1, 1, 1, 0]


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    scores = np.concatenate([rng.beta(2, 5, 500), [np.nan, -1.0, 2.0]])
    steps = rng.integers(0, 30, scores.size)
    d = Discretizer(7, "quantile", step_buckets=3).fit(scores, steps)
    d.save(tmp_path / "disc.json")
    back = Discretizer.load(tmp_path / "disc.json")
    assert back.to_dict() == d.to_dict()
    np.testing.assert_array_equal(back.edges_, d.edges_)  # bit-exact floats through JSON
    probe = np.concatenate([scores, rng.random(200)])
    probe_steps = rng.integers(-5, 60, probe.size)
    np.testing.assert_array_equal(back.transform(probe, probe_steps), d.transform(probe, probe_steps))


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="binning='log'"):
        Discretizer(4, "log")
    with pytest.raises(RuntimeError, match="not fitted"):
        Discretizer(4).transform([0.5])
    with pytest.raises(ValueError, match="step_buckets=2: fit needs the step column"):
        Discretizer(4, step_buckets=2).fit([0.5])
    with pytest.raises(ValueError, match="every score is NaN"):
        Discretizer(4).fit([np.nan, np.nan])
    (tmp_path / "x.json").write_text('{"kind": "other"}')
    with pytest.raises(ValueError, match="not a saved Discretizer"):
        Discretizer.load(tmp_path / "x.json")
