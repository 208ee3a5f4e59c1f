"""A solve folder is one unit: distill reads only what the latest solve wrote (``solve.json``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helper_data import trajectories
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helper.solve import solve_files
from helper.solve.distill import DistillConfig, load_solution, run
from helper.solve.solve_command import SolveConfig
from helper.solve.solve_command import run as solve
from tabular_rl import Discretizer, Solution


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return trajectories(tmp_path_factory.mktemp("trajectories"), n=30)


budget_sets = st.sets(st.integers(1, 4), min_size=1, max_size=3).map(sorted)
reruns = st.lists(st.tuples(budget_sets, st.integers(1, 4)), min_size=2, max_size=4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=reruns)
def test_distill_reads_the_latest_solve_after_any_reruns(data, tmp_path_factory, runs):
    out = tmp_path_factory.mktemp("solve")
    for budgets, bins in runs:  # budget sets that shrink and grow, with the discretizer changing too
        solve(SolveConfig(data=str(data), budgets=budgets, bins=bins, out=str(out)))
    budgets, bins = runs[-1]
    assert sorted(p.name for p in out.glob("policy_c*.npz")) == [f"policy_c{c}.npz" for c in budgets]
    discretizer, solution = load_solution(out)
    assert solution.budget == budgets[-1] and discretizer.bins == bins
    assert solution.policy.shape[1] == discretizer.n_states == bins + 1
    for c in budgets:  # each listed table is the one this solve wrote, on this discretizer
        assert load_solution(out, c)[1].budget == c
    record = json.loads((out / "solve.json").read_text())
    assert record["budgets"] == budgets
    assert set(record["files"]) == {*solve_files.FIXED_OUTPUTS, *(f"policy_c{c}.npz" for c in budgets)}


def test_stale_or_changed_files_are_refused_by_name(data, tmp_path):
    out = tmp_path / "solve"
    solve(SolveConfig(data=str(data), budgets=[1, 3], bins=5, out=str(out)))
    before = Solution.load(out / "policy_c3.npz", Discretizer.load(out / "discretizer.json")).policy.copy()
    solve(SolveConfig(data=str(data), budgets=[1], bins=2, out=str(out)))
    assert not (out / "policy_c3.npz").exists()
    assert load_solution(out)[1].budget == 1
    # A policy copied back from the earlier solve is not read: distill names it.
    other = tmp_path / "other"
    solve(SolveConfig(data=str(data), budgets=[1, 3], bins=5, out=str(other)))
    assert np.array_equal(Solution.load(other / "policy_c3.npz", Discretizer.load(other / "discretizer.json")).policy,
                          before)
    shutil.copy(other / "policy_c3.npz", out / "policy_c3.npz")
    with pytest.raises(ValueError, match=r"policy_c3\.npz not written by the solve"):
        run(DistillConfig(labels=str(out), prm="none", out=str(tmp_path / "helper")))
    assert not (tmp_path / "helper").exists()
    (out / "policy_c3.npz").unlink()
    # A file changed after the solve, a missing record, a record that is a list: refused by name.
    shutil.copy(other / "discretizer.json", out / "discretizer.json")
    with pytest.raises(ValueError, match=r"discretizer\.json changed since the solve"):
        load_solution(out)
    (out / "solve.json").write_text("[]")
    with pytest.raises(ValueError, match=r"solve\.json: not a solve record"):
        load_solution(out)
    (out / "solve.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"solve\.json: not found"):
        load_solution(out)


def test_a_solve_cut_short_leaves_a_folder_distill_refuses(data, tmp_path):
    out = tmp_path / "solve"
    solve(SolveConfig(data=str(data), budgets=[2], bins=3, out=str(out)))
    solve_files.begin(out)  # what a solve killed while writing leaves
    with pytest.raises(FileNotFoundError, match="cut short"):
        load_solution(out)
