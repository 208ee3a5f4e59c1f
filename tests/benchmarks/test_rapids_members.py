"""benchmarks/setups/rapids_members.py: each member's true success on scored rivers is the per-river product of
slips it leaves to the agent (checked river by river), and what it keeps reads back to the same table."""

from __future__ import annotations

import numpy as np
import pytest
import polars as pl

from examples.plain_cue_optimum import expected_outcome
from examples.rapids_optimum import IDEAL_SCORE as SCORE
from examples.rapids_optimum import logged_rows
from examples.rapids import SLIP
from tabular_rl.choice.members import MemberSpec, default_family, fit_member
from tests.imports import benchmark_module

members = benchmark_module("rapids_members")


def kept(seed: int = 0) -> dict:
    labels = logged_rows(64, seed=seed)
    rng = np.random.default_rng(seed + 1)
    risks = rng.choice(list(SCORE), size=(40, 6))  # 40 fresh rivers, scored by a noisy verifier of the risk
    rivers = pl.DataFrame({"river": np.repeat(np.arange(40), 6), "step": np.tile(np.arange(6), 40),
                           "prm_score": [SCORE[r] + rng.normal(0, 0.05) for r in risks.ravel()],
                           "slip": [SLIP[r] for r in risks.ravel()]})
    family = [MemberSpec("table", 3, "uniform"), MemberSpec("table", 3, "uniform", dynamics="stationary")]
    family += default_family(3, "uniform", 100, 6, 5, 3)[-4:]
    budgets = [1, 2, 3]
    rows = len(family)
    selection = {"budgets": budgets, "members": [s.name for s in family],
                 "success": np.linspace(0.2, 0.8, rows * 3).reshape(rows, 3).tolist(),
                 "chosen": {str(c): {"member": family[c].to_dict()} for c in budgets}}
    return {"labels": labels, "rivers": rivers, "family": [s.to_dict() for s in family], "selection": selection}


def test_a_members_true_success_is_the_product_of_the_slips_it_leaves_river_by_river():
    data = kept()
    table = members.member_table(data)
    rivers = data["rivers"].sort(["river", "step"])
    scores = rivers["prm_score"].to_numpy().reshape(-1, 6)
    slips = rivers["slip"].to_numpy().reshape(-1, 6)
    risk_of_slip = {v: k for k, v in SLIP.items()}
    for spec_dict in data["family"]:
        spec = MemberSpec.from_dict(spec_dict)
        member = fit_member(spec, data["labels"], 3, objective="success")
        for c in (1, 2, 3):
            by_river = []
            for score_row, slip_row in zip(scores, slips):
                left, helped = c, []
                for t, score in enumerate(score_row):
                    ask = left > 0 and bool(member.decide(np.array([t]), np.array([score]), np.array([left]))[0])
                    left -= ask
                    helped.append(ask)
                by_river.append(expected_outcome([risk_of_slip[s] for s in slip_row], helped)[0])
            row = table.filter((pl.col("member") == spec.name) & (pl.col("C") == c)).row(0, named=True)
            assert abs(row["true"] - np.mean(by_river)) < 1e-12
            assert row["chosen"] == (spec.name == data["selection"]["chosen"][str(c)]["member"]["name"])


def test_what_it_keeps_reads_back_to_the_same_table(tmp_path):
    data = kept(3)
    members.save(data, tmp_path / "seed3")
    back = members.load(tmp_path / "seed3")
    assert back["family"] == data["family"]
    assert members.member_table(back).equals(members.member_table(data))
    members.report("seed3", members.member_table(back))  # prints; a missing column or cap would raise


def test_the_ceiling_of_an_ideal_verifier_is_the_exact_optimum():
    from examples.rapids import risk_odds_by_step
    from examples.rapids_optimum import RISKS, optimum

    rng = np.random.default_rng(5)
    odds = risk_odds_by_step(6)
    risks = np.array([[rng.choice(RISKS, p=[odds[t][r] for r in RISKS]) for t in range(6)] for _ in range(4000)])
    scores = np.vectorize(SCORE.get)(risks).astype(float)
    slips = np.vectorize(SLIP.get)(risks).astype(float)
    for c in (2, 3, 4):
        assert members.ceiling(scores, slips, c) == pytest.approx(optimum(c)[0], abs=0.02)
