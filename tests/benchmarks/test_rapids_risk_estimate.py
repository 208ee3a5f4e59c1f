"""benchmarks/setups/rapids_risk_estimate.py: the swaps read the same member as rapids_members, and with the rivers'
truth at the member's own bins an ideal verifier reaches the exact optimum and no swap plays better."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from examples.rapids import SLIP, risk_odds_by_step
from examples.rapids_optimum import IDEAL_SCORE, RISKS, logged_rows, optimum
from tabular_rl.choice.members import MemberSpec
from tests.imports import benchmark_module

members = benchmark_module("rapids_members")
estimate = benchmark_module("rapids_risk_estimate")


def ideal_kept(rivers: int = 3000) -> dict:
    rng = np.random.default_rng(7)
    odds = risk_odds_by_step(6)
    risks = np.array([[rng.choice(RISKS, p=[odds[t][r] for r in RISKS]) for t in range(6)] for _ in range(rivers)])
    frame = pl.DataFrame({"river": np.repeat(np.arange(rivers), 6), "step": np.tile(np.arange(6), rivers),
                          "prm_score": [IDEAL_SCORE[r] for r in risks.ravel()],
                          "slip": [SLIP[r] for r in risks.ravel()]})
    family = [MemberSpec("table", 6, "quantile", dynamics="smooth")]
    budgets = [2, 3]
    selection = {"budgets": budgets, "members": [family[0].name], "success": [[0.5, 0.6]],
                 "chosen": {str(c): {"member": family[0].to_dict()} for c in budgets}}
    return {"labels": logged_rows(64, seed=2), "rivers": frame, "family": [s.to_dict() for s in family],
            "selection": selection}


def test_the_truth_at_the_members_bins_is_the_optimum_and_the_member_is_rapids_members_own():
    kept = ideal_kept()
    read = estimate.readings(kept, [2, 3])
    table = members.member_table(kept)
    assert read["the member"] == pytest.approx(table.sort("C")["true"].to_list(), abs=1e-12)
    for j, c in enumerate((2, 3)):
        best = read["ceiling, the member's bins"][j]
        assert best == pytest.approx(optimum(c)[0], abs=0.02)
        assert all(values[j] <= best + 0.01 for values in read.values())
    assert set(read) >= {"true risk, training next states", "estimated risk, rivers' next states",
                         "estimated risk, training next states"}
