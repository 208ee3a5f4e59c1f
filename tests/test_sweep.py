"""Online evaluation: a small sweep of every method, its files and the metrics it reports."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helper_data import HORIZON, PerfectScorer, solved, trajectories

from helper.cli import main
from helper.distill import DistillConfig
from helper.distill import run as distill
from helper.metrics import SWEEP_COLUMNS
from helper.sweep import METHODS, SweepConfig
from helper.sweep import run as sweep


@pytest.fixture(scope="module")
def helper_dir(tmp_path_factory):
    data = trajectories(tmp_path_factory.mktemp("trajectories"))
    solve = solved(tmp_path_factory.mktemp("solve"), data, budgets=(2,))
    out = tmp_path_factory.mktemp("helper")
    distill(DistillConfig(labels=str(solve), prm="none", out=str(out)))
    return out


@pytest.fixture(scope="module")
def swept(helper_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    cfg = SweepConfig(helper=str(helper_dir), out=str(out), episodes=40, questions_per_episode=HORIZON,
                      max_budget=2, rl_timesteps=512, rl_n_steps=32, rl_eval_every=256, rl_val_episodes=8,
                      ci_resamples=200)
    return out, sweep(cfg, scorer=PerfectScorer())


def test_sweep_files_and_columns(swept):
    out, summary = swept
    frame = pd.read_csv(out / "sweep.csv")
    assert list(frame.columns) == list(SWEEP_COLUMNS)
    assert set(frame["method"]) == set(METHODS)
    assert (frame["ci_low"] <= frame["success"]).all() and (frame["success"] <= frame["ci_high"]).all()
    assert (frame["episodes"] == 40).all()
    assert (out / "sweep.png").stat().st_size > 10_000
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    episodes = pd.read_csv(out / "episodes.csv")
    assert len(episodes) == 40 * len(frame)


def test_sweep_budgets_and_references(swept):
    out, summary = swept
    frame = pd.read_csv(out / "sweep.csv")
    assert frame.loc[frame["method"] == "always", "interventions"].item() == HORIZON
    assert frame.loc[frame["method"] == "never", "interventions"].item() == 0
    for method in ("helper", "first_k", "random", "oracle", "exact_optimal", "online_rl", "router", "prm_threshold"):
        rows = frame[frame["method"] == method].set_index("budget")
        assert rows.index.tolist() == [0, 1, 2]
        assert (rows["interventions"] <= rows.index).all()  # the budget is never exceeded
    calls = {m: e["training_calls"] for m, e in summary["methods"].items()}
    assert calls["helper"]["human"] > 0 and calls["exact_optimal"] == {"strong": 0, "human": 0}
    assert calls["online_rl"]["human"] > 0 and calls["online_rl"]["episodes"] >= 512 // HORIZON
    # Its learning curve (at C = 1, 2 against cumulative training calls) is written beside the sweep.
    curve = pd.read_csv(out / "online_rl_curve.csv")
    assert sorted(set(curve["budget"])) == [1, 2] and curve["calls"].is_monotonic_increasing
    assert curve["calls"].max() <= calls["online_rl"]["human"] and (out / "online_rl_curve.png").exists()
    assert set(summary["online_rl"]["calls_to_reach_helper"]) == {1, 2}
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


def test_evaluate_command(helper_dir, tmp_path):
    out = tmp_path / "evaluate"
    assert main(["evaluate", "--helper", str(helper_dir), "--episodes", "6", "--questions-per-episode",
                 str(HORIZON), "--budgets", "0", "2", "--ci-resamples", "100", "--out", str(out)]) == 0
    frame = pd.read_csv(out / "evaluate.csv")
    assert frame["budget"].tolist() == [0, 2] and frame["method"].unique().tolist() == ["helper"]
    assert frame.loc[1, "interventions"] <= 2


@pytest.mark.parametrize("command", ["sweep", "evaluate", "distill"])
def test_command_help_renders(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "--out" in capsys.readouterr().out
