"""benchmarks/setups/rapids.py keeps what it played: the per-episode CSV it saves reads back to the same arrays and
members, run by run in the order written, so its tables recompute from the repository without the run folders."""

from __future__ import annotations

import numpy as np
import polars as pl

from tests.imports import benchmark_module

rapids = benchmark_module("rapids")


def test_saved_episodes_read_back_as_played(tmp_path):
    rng = np.random.default_rng(0)
    per_run = {
        f"benchmarks/data/x/seed{s}": {
            **{m: {c: rng.random(7) for c in (1, 2, 3)} for m in rapids.METHODS},
            "members": {1: "solved", 2: "threshold", 3: f"pooled-{s}"},
        }
        for s in (2, 0)
    }
    path = tmp_path / "expected.csv"
    rapids.to_frame(per_run).write_csv(path)
    back = rapids.from_frame(pl.read_csv(path))
    assert list(back) == list(per_run)
    for run, result in per_run.items():
        assert back[run]["members"] == result["members"]
        for method in rapids.METHODS:
            assert sorted(back[run][method]) == [1, 2, 3]
            for c, values in result[method].items():
                np.testing.assert_allclose(back[run][method][c], values, rtol=0, atol=1e-15)
