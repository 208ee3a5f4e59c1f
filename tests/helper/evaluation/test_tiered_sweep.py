"""``helpgate sweep`` on a helper that chooses which help to call (``helper.evaluation.tiered_sweep``), on the tiered
rapids with the example's cue as the score: every method plays the same held-out episodes under each cost budget,
none spends past its budget or a kind past its cap, the helper plays the solve's own tables, each one-kind helper
calls only its kind, the cascade only its two tiers; the summary's estimates are the solves'; the pipeline's
``--help-kinds`` refusals are one line each."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from one_line_errors import one_error_line
from tiered_rows import PRICES, RiskScorer, rapids_rows

from examples.tiered_rapids import HORIZON, KINDS
from helper.commands.cli import main
from helper.data.environment import EnvSpec
from helper.evaluation.report import ReportConfig
from helper.evaluation.report import run as report
from helper.data.environment import Environment
from helper.evaluation.sweep import SweepConfig, run
from helper.evaluation.tiered_sweep import _helps
from tabular_rl import Discretizer
from tabular_rl.tiered import Resources, estimate_tiered, solve_tiered
from trajectories.shards import mark_complete

ENV = EnvSpec(env="examples.tiered_rapids:make_episodes", agent="examples.tiered_rapids:make_agent")
BUDGETS, EPISODES = [0, 2, 4, 6], 120


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiered-sweep")
    rows = rapids_rows(1200, seed=1)
    (root / "data").mkdir()
    rows.write_parquet(root / "data" / "shard-000.parquet")
    mark_complete(root / "data")
    kinds = [f"{k}:{p:g}" for k, p in PRICES.items()]
    assert main(["solve", "--data", str(root / "data"), "--help-kinds", *kinds, "--help-caps", "human=1",
                 "--budgets", "2", "6", "--bins", "3", "--binning", "uniform", "--out", str(root / "solve")]) == 0
    assert main(["distill", "--labels", str(root / "solve"), "--prm", "none", "--out", str(root / "helper")]) == 0
    summary = run(SweepConfig(spec=ENV, helper=str(root / "helper"), out=str(root / "sweep"), budgets=BUDGETS,
                              episodes=EPISODES, seed=1000, ci_resamples=200), scorer=RiskScorer())
    return root, rows, summary, pd.read_csv(root / "sweep" / "episodes.csv")


def test_every_method_plays_the_same_episodes_within_its_budget_and_caps(swept):
    root, _, summary, episodes = swept
    one_kinds = [f"one_{k}" for k in KINDS]
    assert set(episodes["method"]) == {"never", "always", "helper", *one_kinds, "cascade", "random_kind"}
    ids = {tuple(sorted(group["episode_id"])) for _, group in episodes.groupby(["method", "budget"])}
    assert len(ids) == 1 and len(next(iter(ids))) == EPISODES
    for (method, budget), group in episodes.groupby(["method", "budget"]):
        assert (group["cost"] <= budget + 1e-9).all(), (method, budget)
        assert (group["calls_human"] <= 1).all(), (method, budget)  # the solve's cap
        spent = sum(group[f"calls_{k}"] * p for k, p in PRICES.items())
        assert np.allclose(spent, group["cost"])
    for kind in KINDS:
        own = episodes[episodes["method"] == f"one_{kind}"]
        assert (own[[f"calls_{k}" for k in KINDS if k != kind]].to_numpy() == 0).all()
    cascade = episodes[episodes["method"] == "cascade"]
    assert (cascade["calls_stronger"] == 0).all()  # the cheapest (compute) and the dearest (human) tiers only
    assert (root / "sweep" / "sweep.png").stat().st_size > 10_000
    frame = pd.read_csv(root / "sweep" / "sweep.csv")
    assert {"cost", *(f"calls_{k}" for k in KINDS)} <= set(frame.columns)
    never = episodes[episodes["method"] == "never"]
    assert (never["cost"] == 0).all() and set(summary["methods"]) >= {"helper", "cascade", "random_kind"}


def test_the_summary_reads_the_solves_own_estimates(swept):
    root, rows, _, _ = swept
    summary = json.loads((root / "sweep" / "summary.json").read_text())
    disc = Discretizer.load(root / "solve" / "discretizer.json")
    model = estimate_tiered(rows, disc, tuple(KINDS), objective="success")
    estimated = summary["tiered"]["estimated"]
    for budget in (2, 4, 6):
        resources = Resources.of(list(PRICES.values()), budget, [None, None, 1], horizon=HORIZON)
        assert estimated["helper"][str(budget)]["success"] == pytest.approx(
            solve_tiered(model, resources).expected_success, abs=1e-9)
        for k, kind in enumerate(KINDS):
            own = Resources.of([PRICES[kind]], budget, [1 if kind == "human" else None], horizon=HORIZON)
            assert estimated[f"one_{kind}"][str(budget)]["success"] == pytest.approx(
                solve_tiered(model.only([kind]), own).expected_success, abs=1e-9)
        # The helper's own family holds every one-kind helper: on its estimated model it is never below them.
        assert estimated["helper"][str(budget)]["success"] >= max(
            estimated[f"one_{k}"][str(budget)]["success"] for k in KINDS) - 1e-12
        assert estimated["helper"][str(budget)]["success"] >= estimated["cascade"][str(budget)]["success"] - 1e-12
    assert set(summary["tiered"]["cascade_choice"]) == {"2", "4", "6"}
    frame = pd.read_csv(root / "sweep" / "sweep.csv")
    never = frame.loc[frame["method"] == "never", "success"].item()
    for kind, seen in summary["tiered"]["worth"].items():
        assert seen["best_gain_over_never"] == pytest.approx(frame.loc[frame["method"] == f"one_{kind}",
                                                                       "success"].max() - never)
        assert seen["helper_calls"] == pytest.approx(frame.loc[frame["method"] == "helper", f"calls_{kind}"].sum())
    assert summary["tiered"]["kinds"] == list(KINDS)


@pytest.mark.parametrize("argv, says", [
    (["--help-kinds", "compute:1", "human:4"], "--help-kinds: give the cost budgets"),
    (["--help-kinds", "compute:1", "human:4", "--budgets", "2", "--cross-fit", "2"], "pass --cross-fit 0"),
])
def test_the_pipeline_refuses_what_kinds_cannot_do_in_one_line(argv, says, tmp_path, capsys):
    assert main(["pipeline", "--out", str(tmp_path / "run"), *argv]) == 2
    assert says in one_error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_the_report_pairs_the_helper_with_each_baseline_under_the_same_cost_budget(swept, tmp_path):
    root, _, _, episodes = swept
    text = report(ReportConfig(runs=[str(root / "sweep")], budgets=[2, 4, 6], out=str(tmp_path / "report.md"),
                               figures=False))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert sorted(line.split(" | ")[4] for line in rows) == sorted(["cascade", "random_kind",
                                                                    *(f"one_{k}" for k in KINDS)])
    assert "C is a cost budget per episode" in text
    helper = episodes[(episodes["method"] == "helper") & (episodes["budget"] == 4)]["cost"].mean()
    assert f"{helper:.2f} / " in next(line for line in rows if " cascade " in line)  # the spend column is the cost


def test_a_kind_named_apart_from_its_actor_is_played_by_that_actor(swept, tmp_path):
    """``stronger=ACTOR:2`` through solve and distill: helper.json keeps the actor and the sweep loads it to answer
    the kind (the example's plug-in answers as the episodes' own expert, so the helper plays the same episodes)."""
    root, _, _, episodes = swept
    actor = "examples.tiered_rapids:make_stronger"
    kinds = [f"{k}={actor}:{p:g}" if k == "stronger" else f"{k}:{p:g}" for k, p in PRICES.items()]
    assert main(["solve", "--data", str(root / "data"), "--help-kinds", *kinds, "--help-caps", "human=1",
                 "--budgets", "2", "6", "--bins", "3", "--binning", "uniform", "--out", str(tmp_path / "solve")]) == 0
    assert main(["distill", "--labels", str(tmp_path / "solve"), "--prm", "none", "--out", str(tmp_path / "helper")]) == 0
    config = json.loads((tmp_path / "helper" / "helper.json").read_text())
    assert config["actors"] == {"stronger": actor}
    helps = {h.name: h for h in _helps(Environment(SweepConfig(spec=ENV)), config, 1000)}
    assert helps["stronger"].agent is not None and helps["human"].agent is None  # the actor loaded, not the own expert
    run(SweepConfig(spec=ENV, helper=str(tmp_path / "helper"), out=str(tmp_path / "sweep"), budgets=[6],
                    episodes=EPISODES, seed=1000, ci_resamples=50), scorer=RiskScorer())
    renamed = pd.read_csv(tmp_path / "sweep" / "episodes.csv")
    mine = renamed[renamed["method"] == "helper"].set_index("episode_id")
    before = episodes[(episodes["method"] == "helper") & (episodes["budget"] == 6)].set_index("episode_id")
    assert mine["calls_stronger"].sum() > 0
    assert mine[["success", "cost", "calls_stronger"]].equals(before.loc[mine.index, ["success", "cost", "calls_stronger"]])
