"""Online evaluation: a small sweep of every method, its files and the metrics it reports."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import polars as pl
import pytest
from helper_data import HORIZON, PerfectScorer, solved, trajectories

from helper.commands.cli import main
from helper.data.environment import EnvSpec
from helper.evaluation.play import EvaluateConfig
from helper.evaluation.metrics import SWEEP_COLUMNS
from helper.evaluation.sweep import METHODS, SweepConfig
from helper.evaluation.sweep import run as sweep
from helper.solve.distill import DistillConfig
from helper.solve.distill import run as distill
from helper.stored_config import config_of
from trajectories.shards import read_trajectories
from trajectories.shards import mark_complete


def _docstring(cls, name: str) -> str:
    """The string literal under field ``name`` (in ``cls`` or the base that declares it)."""
    import ast
    import inspect
    import textwrap

    owner = next(c for c in cls.__mro__ if name in c.__dict__.get("__annotations__", {}))
    body = ast.parse(textwrap.dedent(inspect.getsource(owner))).body[0].body
    return next(after.value.value for node, after in zip(body, body[1:])
                if isinstance(node, ast.AnnAssign) and node.target.id == name)


@pytest.fixture(scope="module")
def training_data(tmp_path_factory):
    return trajectories(tmp_path_factory.mktemp("trajectories"))


@pytest.fixture(scope="module")
def helper_dir(training_data, tmp_path_factory):
    data = training_data
    solve = solved(tmp_path_factory.mktemp("solve"), data, budgets=(2,))
    out = tmp_path_factory.mktemp("helper")
    distill(DistillConfig(labels=str(solve), prm="none", out=str(out)))
    return out


@pytest.fixture(scope="module")
def swept(helper_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    # No budgets: they go up to always's interventions, the horizon.
    cfg = SweepConfig(spec=EnvSpec(questions_per_episode=HORIZON), helper=str(helper_dir), out=str(out), episodes=40,
                      rl_timesteps=512, rl_n_steps=32, rl_eval_every=256, rl_val_episodes=8,
                      ci_resamples=200, knn_encoder="tiny")
    return out, sweep(cfg, scorer=PerfectScorer())


def test_sweep_files_and_columns(swept):
    out, summary = swept
    frame = pd.read_csv(out / "sweep.csv")
    assert list(frame.columns) == list(SWEEP_COLUMNS)
    # Every method, and the threshold-type baselines again with no cap (at spends: the second yardstick).
    assert set(frame["method"]) == set(METHODS) | {f"{m}_nocap" for m in ("prm_threshold", "router", "knn")}
    assert (frame["ci_low"] <= frame["success"]).all() and (frame["success"] <= frame["ci_high"]).all()
    assert (frame["episodes"] == 40).all()
    assert (out / "sweep.png").stat().st_size > 10_000
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 40 * len(frame)


def test_sweep_budgets_and_references(swept, training_data):
    out, summary = swept
    frame = pd.read_csv(out / "sweep.csv")
    assert frame.loc[frame["method"] == "always", "interventions"].item() == HORIZON
    assert frame.loc[frame["method"] == "never", "interventions"].item() == 0
    assert summary["budgets"] == list(range(HORIZON + 1))
    for method in ("helper", "first_k", "random", "oracle", "exact_optimal", "online_rl", "router",
                   "prm_threshold", "knn"):
        rows = frame[frame["method"] == method].set_index("budget")
        assert rows.index.tolist() == list(range(HORIZON + 1))
        assert (rows["interventions"] <= rows.index).all()  # the budget is never exceeded
    # No cap: the priced helper at each target spend, and each threshold baseline's curve played past its spend.
    priced = frame[frame["method"] == "helper_priced"].set_index("budget")
    assert priced.index.tolist() == list(range(1, HORIZON + 1))
    for method in ("router", "prm_threshold", "knn"):
        curve = frame[frame["method"] == f"{method}_nocap"].set_index("budget")
        assert curve.index.tolist()[:HORIZON] == list(range(1, HORIZON + 1))
        assert curve["interventions"].max() >= priced["interventions"].max() - 0.02 or curve.index.max() == HORIZON
    # Measured over the whole share range: first_k at C = horizon is always-intervene.
    entries = summary["methods"]
    assert entries["first_k"]["apgr_extrapolated_share"] == 0.0 and entries["always"]["apgr_extrapolated_share"] == 0.0
    assert all(0.0 <= e["apgr_extrapolated_share"] <= 1.0 for e in entries.values())
    calls = {m: e["training_calls"] for m, e in summary["methods"].items()}
    # The helper's training cost is the human answers in the rows it was trained on.
    rows = read_trajectories(training_data)
    human = rows.filter(pl.col("intervened") & (pl.col("actor") == "human")).height
    assert calls["helper"]["human"] == human > 0 and calls["exact_optimal"] == {"strong": 0, "human": 0}
    assert calls["online_rl"]["human"] > 0 and calls["online_rl"]["episodes"] >= 512 // HORIZON
    # Its learning curve (at every C >= 1 against cumulative training calls) is written beside the sweep.
    curve = pd.read_csv(out / "online_rl_curve.csv")
    assert sorted(set(curve["budget"])) == list(range(1, HORIZON + 1)) and curve["calls"].is_monotonic_increasing
    assert curve["calls"].max() <= calls["online_rl"]["human"] and (out / "online_rl_curve.png").exists()
    assert set(summary["online_rl"]["calls_to_reach_helper"]) == set(range(1, HORIZON + 1))
    assert calls["oracle"]["human"] == 40 * HORIZON
    # Every budget's helper shares the loaded models and the decision counters.
    assert summary["helper_stats"]["decisions"] > 0 and summary["helper_stats"]["fallbacks"] == 0


def test_helper_matches_exact_optimum_with_known_dynamics(swept):
    _, summary = swept
    helper, exact = summary["methods"]["helper"], summary["methods"]["exact_optimal"]
    for budget in (1, 2):
        # Same episodes and the same simulator draws: a helper that reproduces the optimal
        # policy gets the optimum's success.
        assert helper["success"][budget] >= 0.95 * exact["success"][budget]
        assert helper["exact_optimal_ratio"][budget] >= 0.95
    oracle = summary["methods"]["oracle"]
    assert all(oracle["success"][b] >= exact["success"][b] for b in (1, 2))


def test_priced_helper_spends_about_its_target_and_every_curve_reaches_it(swept):
    _, summary = swept
    priced = summary["methods"]["helper_priced"]["interventions"]
    spent = [priced[target] for target in range(1, HORIZON + 1)]
    # Priced on the training rows to spend the target, with no cap: on held-out episodes about that, more for more.
    assert all(abs(s - target) <= 1.0 for target, s in enumerate(spent, start=1)) and spent == sorted(spent), spent
    # Every threshold-type baseline's no-cap curve reads the priced helper at its own spend: none out of reach.
    for method in ("prm_threshold", "router", "knn"):
        readings = summary["at_spend"][method]
        assert sorted(readings) == list(range(1, HORIZON + 1))
        assert all(r["mix"] is not None and r["helper_priced_minus"] is not None for r in readings.values()), method


def test_threshold_baselines_play_the_level_chosen_for_each_cap(swept):
    _, summary = swept
    for method in ("prm_threshold", "router", "knn"):
        levels = summary[method]["capped_levels"]["levels"]
        assert sorted(int(c) for c in levels) == list(range(1, HORIZON + 1))
        # The level chosen for a cap spends (on the training folds) at most the cap, and more under a larger one.
        spent = [levels[str(c)]["cross_fitted_interventions"] for c in range(1, HORIZON + 1)]
        assert all(s <= c + 1e-9 for c, s in zip(range(1, HORIZON + 1), spent)) and spent == sorted(spent)


def test_oracle_is_an_upper_bound_episode_by_episode(swept):
    # ProductQA, simulator, no memory boost, human expert: decisions are independent and replayable,
    # so the row is called "oracle" and no gate with the same budget beats it on any episode.
    out, summary = swept
    episodes = pd.read_csv(out / "episodes.csv")
    oracle = episodes[episodes["method"] == "oracle"].set_index(["budget", "episode_id"])["success"]
    # Every method capped at C (the no-cap rows are keyed by a spend, not a cap).
    uncapped = episodes["method"].str.endswith("_nocap") | (episodes["method"] == "helper_priced")
    others = episodes[(episodes["method"] != "oracle") & ~uncapped]
    paired = others.join(oracle.rename("oracle"), on=["budget", "episode_id"])
    assert paired["oracle"].notna().all() and len(paired) == len(others)  # every method, every budget
    assert (paired["oracle"] >= paired["success"] - 1e-12).all()
    assert all(summary["methods"]["helper"]["oracle_ratio"][b] <= 1.0 + 1e-12 for b in range(1, HORIZON + 1))


def test_random_matches_the_helpers_interventions(swept):
    _, summary = swept
    helper, random = summary["methods"]["helper"]["interventions"], summary["methods"]["random"]["interventions"]
    for budget in range(HORIZON + 1):
        assert random[budget] == pytest.approx(helper[budget], abs=0.05), budget


def test_oracle_name_says_whether_it_is_a_bound():
    from helper.evaluation.methods import oracle_is_exact

    assert oracle_is_exact(SweepConfig())  # ProductQA simulator, no memory boost, human
    assert not oracle_is_exact(SweepConfig(EnvSpec(memory_boost=0.1)))
    assert not oracle_is_exact(SweepConfig(EnvSpec(agent="smollm2")))
    assert not oracle_is_exact(SweepConfig(EnvSpec(env="textworld")))


def test_methods_option_takes_the_registry_keys_and_refuses_others(capsys):
    """--methods is drawn from the one registry: a method added there is a choice, an unknown name is refused."""
    from helper.config_cli import parse_config
    from helper.evaluation.methods import METHODS as REGISTRY
    from helper.evaluation.methods import NEEDS

    assert all(m.needs <= set(NEEDS) for m in REGISTRY.values())
    every = list(REGISTRY)
    assert parse_config(SweepConfig, ["--methods", *every]).methods == every
    with pytest.raises(SystemExit) as exit_info:
        parse_config(SweepConfig, ["--methods", "helper", "bogus"], prog="helpgate sweep")
    assert exit_info.value.code == 2 and "bogus" in capsys.readouterr().err
    # The sweep loads the helper exactly for the methods that need it or its PRM.
    assert {n for n, m in REGISTRY.items() if {"helper", "prm"} & m.needs} == {"helper", "helper_priced",
                                                                            "prm_threshold"}


def test_evaluate_command(helper_dir, tmp_path):
    out = tmp_path / "evaluate"
    assert main(["evaluate", "--helper", str(helper_dir), "--episodes", "6", "--questions-per-episode",
                 str(HORIZON), "--budgets", "0", "2", "--out", str(out)]) == 0
    frame = pd.read_csv(out / "evaluate.csv")
    assert frame["budget"].tolist() == [0, 2] and frame["method"].unique().tolist() == ["helper"]
    assert frame.loc[1, "interventions"] <= 2


@pytest.mark.parametrize("command, config", [("sweep", SweepConfig), ("evaluate", EvaluateConfig),
                                             ("distill", DistillConfig)])
def test_command_help_shows_each_options_docstring(command, config, capsys):
    import dataclasses
    import re

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"], experiments=True)  # every field: experiment options too (helpgate hides those)
    assert exit_info.value.code == 0
    # tyro wraps lines (in a box on a terminal): compare the words, without the box and backticks.
    words = lambda text: " ".join(re.sub(r"[`│╭╮╰╯─]", " ", text).split())  # noqa: E731
    text = words(capsys.readouterr().out)
    # A nested config (the EnvSpec) shows its own fields, flattened: --env, not --spec.env.
    flat = [(type(f.default_factory()), g) for f in dataclasses.fields(config) if f.name == "spec"
            for g in dataclasses.fields(f.default_factory())]
    flat += [(config, f) for f in dataclasses.fields(config) if f.name != "spec"]
    for owner, f in flat:
        first = " ".join(words(_docstring(owner, f.name)).split()[:4])
        assert f"--{f.name.replace('_', '-')}" in text and first in text, (command, f.name, first)


def test_textworld_sweep_has_a_one_step_oracle_and_measured_budgets(tmp_path):
    # Sequential: one decision changes the value of the next, so the hindsight ranking is no bound.
    summary = sweep(config_of(SweepConfig, env="textworld", tw_games=2, tw_quest_lengths=[3], tw_sim_p=0.3,
                              episodes=4, methods=["oracle"], out=str(tmp_path), ci_resamples=50))
    methods = summary["methods"]
    assert "oracle_1step" in methods and "oracle" not in methods
    assert not any("oracle_ratio" in entry for entry in methods.values())
    always = max(methods["always"]["interventions"].values())
    # Budgets up to always's mean interventions (rounded up), not the longest allowed episode.
    assert summary["budgets"] == list(range(int(np.ceil(always - 1e-9)) + 1))


def test_router_reads_no_annotation_and_calibrates_out_of_fold(tmp_path):
    from helper.evaluation.methods import Router, SweepContext

    data = trajectories(tmp_path / "rows", n=60)
    ctx = SweepContext(cfg=SweepConfig(budgets=[0, 1, 2], train_data=str(data)), env=None, out=tmp_path)
    router = Router()
    assert router.prepare(ctx) is None
    # The simulator's rows carry the question type (a dataset annotation): never a router feature.
    assert not [name for name in router.names if name.startswith("f_type_")]
    assert "f_memory_advice_hits" in router.names
    assert router.thresholds[0] == -np.inf and np.isfinite(router.thresholds[1]) and np.isfinite(router.thresholds[2])


def test_router_learns_the_episode_outcome_where_only_the_end_is_rewarded(tmp_path):
    from helper.evaluation.methods import Router, SweepContext
    from helper.gates.features import frame_features
    from trajectories.shards import write_shard

    rows = read_trajectories(trajectories(tmp_path / "rows", n=60))
    # No step is rewarded: the episode's outcome is all there is.
    sparse = rows.with_columns(pl.lit(0.0).alias("reward"))
    write_shard(sparse, tmp_path / "sparse" / "shard-000.parquet")
    mark_complete(tmp_path / "sparse")
    assert 0 < (sparse.group_by("episode_id").agg(pl.col("success").first() >= 0.5)["success"].sum()) < 60
    ctx = SweepContext(cfg=SweepConfig(budgets=[0, 1], train_data=str(tmp_path / "sparse")), env=None, out=tmp_path)
    router = Router()
    # Learning "reward < 0.5" here would see every step fail and refuse to route.
    assert router.prepare(ctx) is None
    # Its predicted success separates the episodes that failed from those that succeeded.
    won = sparse["success"].to_numpy() >= 0.5
    predicted_success = 1.0 - router.model.predict_proba(frame_features(sparse, router.names))
    assert predicted_success[won].mean() > predicted_success[~won].mean()


def test_the_priced_helper_is_read_on_each_curve_at_its_own_spend():
    """Hand-computed curves: a baseline that brackets the priced helper's spend between two levels, one whose
    lowest level already over-spends it (read between never and that level), one that cannot reach it."""
    from helper.evaluation.spend import at_spend

    rows = []
    for method, budget, success, used in [
            ("never", 0, [0, 0], [0, 0]), ("helper_priced", 1, [1, 0], [1, 1]),
            ("under_nocap", 1, [0, 0], [0, 1]), ("under_nocap", 2, [1, 0], [1, 2]),   # 0.5 then 1.5 an episode
            ("over_nocap", 1, [1, 1], [2, 2]),                                          # 2 an episode at level 1
            ("short_nocap", 1, [0, 1], [0, 1]), ("short_nocap", 2, [1, 1], [0, 1])]:    # never past 0.5
        rows += [{"method": method, "budget": budget, "episode_id": f"e{k}", "success": s, "interventions": u}
                 for k, (s, u) in enumerate(zip(success, used))]
    out = at_spend(rows)
    assert set(out) == {"under", "over", "short"}
    # under: 0.5 at level 1, 1.5 at level 2; at the priced helper's 1.0 half of each: (0 + 0.5) / 2 = 0.25.
    assert out["under"][1] == {"helper_priced_interventions": 1.0, "mix": {1: 0.5, 2: 0.5},
                               "success_at_priced_spend": 0.25, "helper_priced_minus": 0.25}
    # over: never (0) and level 1 (2.0) bracket 1.0: half of each, (0 + 1) / 2 = 0.5.
    assert out["over"][1]["mix"] == {0: 0.5, 1: 0.5} and out["over"][1]["helper_priced_minus"] == 0.0
    # short: its curve ends at 0.5 an episode, below the priced helper's 1.0: no reading.
    assert out["short"][1]["mix"] is None and out["short"][1]["helper_priced_minus"] is None


def test_the_routers_calibration_folds_hold_whole_task_groups(tmp_path):
    from helper.evaluation.methods import Router, SweepContext, router_fold_groups
    from prm.data.folds import task_group

    rows = read_trajectories(trajectories(tmp_path / "rows", n=60))
    groups, by = router_fold_groups(rows, 5)
    assert by == "task group" and list(groups) == [task_group(t) for t in rows["task_id"]]
    assert len(set(groups)) < rows["episode_id"].n_unique()  # groups, not episodes
    few, by = router_fold_groups(rows, len(set(groups)) + 1)  # fewer groups than folds: whole episodes
    assert by == "episode" and list(few) == rows["episode_id"].to_list()
    ctx = SweepContext(cfg=SweepConfig(budgets=[0, 1], train_data=str(tmp_path / "rows")), env=None, out=tmp_path)
    assert Router().prepare(ctx) is None and ctx.extra["router"]["calibration_folds_by"] == "task group"
