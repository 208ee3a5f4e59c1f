"""A helper used on other episodes than it was trained on warns once, naming what differs."""

from __future__ import annotations

import json
import warnings

import numpy as np
import polars as pl
import pytest

from agile.protocol import Observation
from helper import HelperGate
from helper.solve.distill import DistillConfig
from helper.solve.distill import run as distill
from helper.gates.features import FeatureClassifier, frame_features
from helper.solve.solve_command import SolveConfig
from helper.solve.solve_command import run as solve
from tabular_rl import TabularModel, simulate
from trajectories.shards import mark_complete

TRAINED = {"env": ["productqa"], "horizon": 4, "budget": 2, "method": "exact"}


def obs(step=0, env="productqa", horizon=4, episode="e", **features) -> Observation:
    return Observation(episode, env, "t", step, "state", horizon, features or {"memory_hits": 1.0})


def gate(trained=TRAINED, budget=2) -> HelperGate:
    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"episode_id": ["e"] * 40, "step": np.arange(40) % 4, "horizon": [4] * 40,
                          "budget_left": rng.integers(1, 3, 40), "features": ['{"memory_hits": 1.0}'] * 40})
    names = ["step", "budget_left", "f_memory_hits"]
    classifier = FeatureClassifier("logreg", names).fit(frame_features(frame, names), rng.integers(0, 2, 40))
    return HelperGate("features", classifier, budget=budget, solved_budget=2, trained_on=trained)


def caught(calls) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        calls()
    return [str(w.message) for w in seen]


def test_larger_budget_longer_horizon_other_env_warn_once_naming_each():
    g = gate(budget=4)
    messages = caught(lambda: [g.should_intervene(obs(t % 15, env="agile", horizon=15, episode=f"e{t}"))
                               for t in range(30)])
    assert len(messages) == 1  # once, not per call
    (text,) = messages
    assert "helper trained for budget <= 2 on env productqa with horizon 4" in text
    assert "used with budget 4 on env agile with horizon 15" in text
    assert "Differs: env, horizon, budget" in text and "\n" not in text


@pytest.mark.parametrize("use,field", [(dict(budget=3), "budget"), (dict(horizon=6), "horizon"),
                                       (dict(env="agile"), "env")])
def test_each_field_alone_is_named(use, field):
    g = gate(budget=use.pop("budget", 2))
    (text,) = caught(lambda: g.should_intervene(obs(**use)))
    assert text.split("Differs: ")[1].startswith(field + ";")


def test_a_matching_use_does_not_warn():
    g = gate()
    assert caught(lambda: [g.should_intervene(obs(t, episode=f"e{t}")) for t in range(4)]) == []
    # Fewer decisions or less budget than trained for is within what it learned.
    assert caught(lambda: gate(budget=1).intervene_probability(obs(1, horizon=3), 1)) == []


def test_absent_feature_columns_are_refused():
    g = gate()
    with pytest.raises(ValueError, match=r"reads the observation features \['memory_hits'\]") as error:
        g.should_intervene(obs(memory_top_similarity=0.3))
    assert "\n" not in str(error.value)


def test_distill_stores_what_it_was_trained_on(tmp_path):
    rng = np.random.default_rng(1)
    T, S = 4, 2
    model = TabularModel(transitions=rng.dirichlet(np.ones(S + 1), size=(T, S, 2)),
                         rewards=rng.integers(0, 2, (T, S, 2)).astype(float), start=np.full(S, 1 / S))
    frame = simulate(model, 300, budget=2, behaviour=0.4, seed=0).drop("state")
    frame = frame.with_columns(pl.lit("agile").alias("env"), pl.lit(T).alias("horizon"), pl.lit("human").alias("actor"),
                               (pl.col("reward").sum().over("episode_id") / T).alias("success"),
                               pl.lit('{"memory_hits": 1.0}').alias("features"))
    (tmp_path / "traj").mkdir()
    frame.write_parquet(tmp_path / "traj" / "shard-000.parquet")
    mark_complete(tmp_path / "traj")
    solve(SolveConfig(data=str(tmp_path / "traj"), advice_cost=0.2, bins=2, out=str(tmp_path / "solve")))
    distill(DistillConfig(labels=str(tmp_path / "solve"), prm="none", out=str(tmp_path / "helper"), model="logreg"))
    stored = json.loads((tmp_path / "helper" / "helper.json").read_text())["trained_on"]
    assert stored == {"env": ["agile"], "horizon": T, "budget": T, "method": "priced", "advice_cost": 0.2}
    helper = HelperGate.load(tmp_path / "helper", budget=50)
    # A priced helper has no budget to exceed; the longer episode is named.
    (text,) = caught(lambda: [helper.should_intervene(obs(t, env="agile", horizon=8, episode=f"x{t}"))
                              for t in range(8)])
    assert "no budget (priced) on env agile with horizon 4" in text and text.split("Differs: ")[1].startswith("horizon;")


def test_agile_eval_budget_follows_the_kind_of_helper():
    from helper.evaluation.agile_advice import AgileEvalConfig, helper_budget

    cfg = AgileEvalConfig(questions_per_group=20)
    assert helper_budget(cfg, {"method": "priced", "advice_cost": 0.3}) == 20  # the price decides
    assert helper_budget(cfg, TRAINED) == 5  # the rate version: by default a quarter of the questions
    assert helper_budget(AgileEvalConfig(questions_per_group=20, budget=3), {"method": "priced"}) == 3
    with pytest.raises(ValueError, match="budget=-1"):
        helper_budget(AgileEvalConfig(budget=-1), TRAINED)


def test_agile_eval_refuses_a_helper_of_another_env_before_the_policy_runs(tmp_path):
    from helper.evaluation.agile_advice import AgileEvalConfig, run

    folder = tmp_path / "helper"
    folder.mkdir()
    (folder / "helper.json").write_text(json.dumps({"trained_on": TRAINED | {"env": ["textworld"]}}))
    ran = []
    with pytest.raises(ValueError, match=r"on env textworld.*not on ProductQA's executor \(env productqa\)"):
        run(AgileEvalConfig(helper=str(folder)), log=ran.append)
    assert ran == []  # refused before anything was evaluated
