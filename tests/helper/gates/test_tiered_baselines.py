"""The baselines of a helper that chooses which help to call (``helper.gates.tiered_baselines``): the one-kind helper is the
restricted solve, written in every kind's resource states; the cascade is the best of every threshold pair by brute
force, within the budget; the random kind keeps the helper's timing and draws only affordable kinds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from tiered_models import random_tiered_model
from tiered_rows import PRICES, RiskScorer, rapids_rows

from agile.protocol import Observation
from examples.tiered_rapids import HORIZON, KINDS
from helper.gates.tiered_baselines import (RandomKindGate, best_cascade, cascade_risk, cascade_table,
                                     one_kind_solution)
from helper.gates.tiered_helper_gate import TieredHelperGate
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, estimate_tiered, evaluate_table, solve_tiered


@pytest.mark.parametrize("caps", [(None, None, None), (None, 1, 2)])
@pytest.mark.parametrize("budget", [2, 5])
def test_the_one_kind_helper_is_the_restricted_solve_in_every_kinds_resource_states(caps, budget):
    model = random_tiered_model(3, T=4, S=3, K=3)
    resources = Resources.of([1, 2, 3], budget, caps, horizon=model.horizon)
    for k, kind in enumerate(model.kinds):
        own = Resources.of([resources.prices[k]], budget, [caps[k]], horizon=model.horizon)
        restricted = solve_tiered(model.only([kind]), own)
        mapped = one_kind_solution(model, resources, kind)
        assert set(np.unique(mapped.tables[0])) <= {0, k + 1}  # only the agent and that kind
        # Played in the full model, the mapped table reaches exactly the restricted optimum, at its cost.
        assert mapped.expected_success == pytest.approx(restricted.expected_success, abs=1e-12)
        assert mapped.expected_cost == pytest.approx(restricted.expected_cost, abs=1e-12)
        assert mapped.expected_calls[[a for a in range(1, 4) if a != k + 1]].sum() == 0


def test_the_cascade_is_the_best_threshold_pair_by_brute_force_and_stays_within_the_budget():
    model = random_tiered_model(5, T=3, S=4, K=2)
    risk = np.array([0.0, 1.0, np.nan, 2.0])
    for budget in (1, 2, 3, 4):
        resources = Resources.of([1, 2], budget, horizon=model.horizon)
        chosen, name = best_cascade(model, risk, ("kind1", "kind2"), resources)
        levels = [0.0, 1.0, 2.0, np.inf]
        everything = [evaluate_table(model, resources, cascade_table(risk, t1, t2, (1, 2), resources, 3, f))
                      .expected_success for t1, t2 in itertools.product(levels, levels) if t1 <= t2
                      for f in (False, True)]
        assert chosen.expected_success == pytest.approx(max(everything), abs=1e-12), name
        units = resources.states()[:, 0]
        table = chosen.tables[0]
        assert not np.any(table[..., units < 1] > 0)  # nothing called that the budget left cannot pay
        assert not np.any(table[..., units < 2] == 2)
        assert not np.any(table[:, 2] > 0)  # the unknown state (no score): the agent acts


def test_cascade_risk_reads_a_lower_score_bin_as_riskier_and_the_unknown_state_as_none():
    disc = Discretizer(3, "uniform", step_buckets=2).fit(np.linspace(0, 1, 30), np.arange(30) % 4)
    risk = cascade_risk(disc)
    assert risk.shape == (disc.n_states,)
    bins, _ = disc.split(np.arange(disc.n_states))
    assert np.isnan(risk[bins == disc.unknown_bin]).all()
    assert np.array_equal(risk[bins == 0], [0.0, 0.0]) and np.array_equal(risk[bins == 2], [-2.0, -2.0])


def test_the_random_kind_calls_where_the_helper_does_and_only_affordable_kinds():
    rows = rapids_rows(600, seed=1)
    disc = Discretizer(3, "uniform").fit(rows["prm_score"], rows["step"])
    model = estimate_tiered(rows, disc, kinds=tuple(KINDS), objective="success")
    solution = solve_tiered(model, Resources.of(list(PRICES.values()), 6, horizon=model.horizon))
    helper = TieredHelperGate(solution, disc, RiskScorer(), budget=6)
    random_kind = RandomKindGate(solution, disc, RiskScorer(), budget=6).with_budget(6)
    assert isinstance(random_kind, RandomKindGate)
    texts = rows.filter(rows["step"] == 0)["state_text"].to_list()[:60]
    drawn = set()
    for i, text in enumerate(texts):
        for left in (0.5, 1, 2, 3, 4, 6):
            obs = Observation(f"e{i}", "tiered_rapids", "t", i % HORIZON, text, HORIZON)
            wanted, picked = helper.pick(obs, left, {}), random_kind.pick(obs, left, {})
            assert (wanted is None) == (picked is None)
            if picked is not None:
                assert PRICES[picked] <= left
                drawn.add(picked)
    assert drawn == set(KINDS)
