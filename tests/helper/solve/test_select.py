"""The member each cap plays, chosen on the training folds: written by distill, played by the gate, and chosen
without a single held-out row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helper_data import HORIZON, PerfectScorer, solved, trajectories

from agile.executor.episode import AgileSource
from agile.envs.catalog_generator import default_catalog_dir
from helper.data.environment import EnvSpec
from helper.evaluation.sweep import SweepConfig
from helper.evaluation.sweep import run as sweep
from helper.solve.distill import DistillConfig
from helper.solve.distill import run as distill
from helper.gates.helper_gate import HelperGate
from helper.gates.member_files import load_members


@pytest.fixture(scope="module")
def helper_folder(tmp_path_factory):
    data = trajectories(tmp_path_factory.mktemp("rows"), n=90)
    solve = solved(tmp_path_factory.mktemp("solve"), data, budgets=(1, 2, 3))
    out = tmp_path_factory.mktemp("helper")
    distill(DistillConfig(labels=str(solve), prm="none", out=str(out)))
    return out, solve


def test_distill_writes_the_member_of_every_solved_cap(helper_folder):
    out, _ = helper_folder
    record = json.loads((out / "members" / "selection.json").read_text())
    assert sorted(record["chosen"]) == ["1", "2", "3"] and record["evaluator"] in ("replay", "judge")
    names = record["members"]
    assert names[0] == "table:3q" and sum(n.startswith("threshold@") for n in names) == 32
    for c, entry in record["chosen"].items():
        j = record["budgets"].index(int(c))
        success = [row[j] for row in record["success"]]
        # The chosen member is the best on the training folds: never below the best threshold there.
        assert entry["cross_fitted_success"] == pytest.approx(max(success))
        assert entry["cross_fitted_success"] >= entry["best_threshold"]["cross_fitted_success"] - 1e-9
        assert (out / entry["policy_file"]).is_file() and (out / entry["discretizer_file"]).is_file()
    assert json.loads((out / "helper.json").read_text())["members"] == {c: e["member"]["name"]
                                                                        for c, e in record["chosen"].items()}


def test_the_gate_plays_the_member_of_its_cap(helper_folder):
    out, _ = helper_folder
    members = load_members(out)
    gate = HelperGate.load(out)
    gate.scorer = PerfectScorer()
    scorer = gate.scorer
    episodes = AgileSource(default_catalog_dir(0), "test", model=None, memory="lexical").episodes(
        range(6), 3, questions_per_episode=HORIZON)
    for cap in (1, 2, 3):
        played = gate.with_budget(cap)
        table, discretizer, name = members[cap]
        assert played.backend == "table" and played.member == name and played.budget == cap
        for episode in episodes:
            observation = episode.observe()
            score = scorer.score(observation)
            for left in range(cap + 1):
                want = table.intervene_prob([observation.step], discretizer.transform([score], [observation.step]),
                                            [left])[0] > 0.5
                assert (played.intervene_probability(observation, left) >= 0.5) == bool(want)
    # A cap no member was chosen for plays the classifier, as a helper without members does.
    assert gate.with_budget(5).member is None and gate.with_budget(5).backend == "features"
    assert HelperGate.load(out, budget=2).member == members[2][2]
    assert HelperGate.load(out, budget=2, backend="features").member is None  # an explicit backend is the caller's


def test_no_choice_reads_a_held_out_row(helper_folder, tmp_path, monkeypatch):
    """Every row any member or level is fitted on or read on comes from the training rows: a spy on the fitting and
    the reading of every fold fails the test on a single row of the held-out groups or episodes."""
    import tabular_rl.choice.selection as selection

    out, solve = helper_folder
    seen: list = []
    fit, read = selection.fit_member, selection._read_fold

    def spy_fit(spec, rows, *args, **kwargs):
        seen.append(set(rows["episode_id"].to_list()) | set(rows["task_id"].to_list()))
        return fit(spec, rows, *args, **kwargs)

    def spy_read(evaluator, members, budgets, held_rows, fit_rows, *args):
        seen.append(set(held_rows["episode_id"].to_list()) | set(held_rows["task_id"].to_list()))
        return read(evaluator, members, budgets, held_rows, fit_rows, *args)

    monkeypatch.setattr(selection, "fit_member", spy_fit)
    monkeypatch.setattr(selection, "_read_fold", spy_read)
    summary = sweep(SweepConfig(spec=EnvSpec(questions_per_episode=HORIZON), helper=str(out), out=str(tmp_path),
                                episodes=8, budgets=[0, 1, 2], methods=["helper", "helper_priced", "prm_threshold",
                                                                        "router"],
                                train_data=str(solve), ci_resamples=50), scorer=PerfectScorer())
    episodes = pd.read_csv(tmp_path / "episodes.csv")
    held_out = set(episodes["episode_id"].astype(str)) | set(episodes["group"].astype(str))
    training = json.loads((solve / "solution.json").read_text())["data"]["episodes"]
    assert seen and training > 0
    assert all(not (ids & held_out) for ids in seen)  # no held-out episode, no held-out group
    groups = {str(t).split("/")[0] for ids in seen for t in ids if "/" in str(t)}
    assert groups and not groups & set(episodes["group"].astype(str))
    assert set(summary["prm_threshold"]["capped_levels"]["levels"]) == {"1", "2"}
    assert np.isfinite(summary["helper_priced"]["targets"]["1"]["cross_fitted_success"])


def test_distill_says_a_judged_figure_ranks_the_members_and_is_no_forecast(capsys):
    from helper.solve.select import _print

    entry = {"member": {"name": "table:6q"}, "cross_fitted_success": 0.68, "cross_fitted_interventions": 1.4,
             "configured_solve_success": 0.68, "best_threshold": {"member": "threshold@0.3", "cross_fitted_success": 0.4}}
    for evaluator, caveat in (("judge", True), ("replay", False)):
        _print({"folds": 5, "folds_by": "episode", "evaluator": evaluator, "episodes": 64, "chosen": {"3": entry}})
        out = capsys.readouterr().out
        assert "C=3: table:6q 0.6800" in out
        assert ("not a forecast" in out) is caveat


def test_the_priced_helper_prices_the_step_tables_only():
    from helper.solve.select import priced_tables
    from tabular_rl.choice.members import default_family

    family = default_family(6, "quantile", rows=100, horizon=5, decisions=5, top_budget=2)
    assert [s.name for s in priced_tables(family)] == ["table:6q", "table:6q,pooled"]
