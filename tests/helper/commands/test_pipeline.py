"""`helpgate pipeline` end to end on the simulator agent and a tiny PRM, then resumed."""

import json

import polars as pl
import pytest
from imports import benchmark_module

from helper.commands.cli import main
from helper.commands.pipeline import STAGES
from trajectories.number_maps import number_map_keys


def _helper_features(out):
    import warnings

    from helper import HelperGate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HelperGate.load(out / "helper").classifier.feature_names


def test_pipeline_runs_every_stage_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["pipeline", "--out", str(out), "--quick", "--agent", "simulator", "--prm-model", "tiny",
            "--episodes", "32", "--eval-episodes", "8", "--questions-per-episode", "4", "--budgets", "1", "2"]
    assert main(args) == 0
    for stage in STAGES:
        assert (out / stage / ".done").exists(), stage
    sweep = pl.read_csv(out / "sweep" / "sweep.csv")
    assert sweep.columns == ["method", "budget", "success", "interventions", "episodes", "ci_low", "ci_high"]
    helper = sweep.filter(pl.col("method") == "helper")
    assert sorted(helper["budget"].to_list()) == [0, 1, 2]
    assert (helper["interventions"] <= helper["budget"]).all()
    # The references: always-intervene asks at every one of the 4 decisions and, the human being
    # right, always succeeds; never asks none; at budget 0 every gate is never (same episodes).
    by = {(m, b): (x, n) for m, b, x, n in sweep.select("method", "budget", "success", "interventions").iter_rows()}
    (always,) = [v for (m, _), v in by.items() if m == "always"]
    (never,) = [v for (m, _), v in by.items() if m == "never"]
    assert always == (1.0, 4.0) and never[1] == 0.0
    # (The priced helper and the no-cap curves play spends of 1 and up, no C = 0.)
    uncapped = {m for m in set(sweep["method"]) if m.endswith("_nocap")} | {"helper_priced"}
    assert all(by[(m, 0)] == never for m in set(sweep["method"]) - {"always", "never"} - uncapped)
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    # The summary holds the same numbers as sweep.csv, for every method and budget.
    for (method, budget), (success, interventions) in by.items():
        entry = summary["methods"][method]
        assert entry["success"][str(budget)] == pytest.approx(success), (method, budget)
        assert entry["interventions"][str(budget)] == pytest.approx(interventions), (method, budget)
    assert (out / "sweep" / "sweep.png").stat().st_size > 0
    # ProductQA's default: the gate reads the base agent's proposal, and so does every scored baseline.
    assert json.loads((out / "pipeline.json").read_text())["decide_after"] == "proposal"
    # The pipeline hands distill the largest of --budgets: the helper learned from that solved table.
    helper_json = json.loads((out / "helper" / "helper.json").read_text())
    assert helper_json["solved_budget"] == 2 and helper_json["distill_config"]["solved_budget"] == 2
    assert summary["decide_after"] == "proposal"
    assert json.loads((out / "prm" / "metrics.json").read_text())["target"] == "label_proposal"
    # Evidence that holds: the solver and the helper fitted on out-of-fold scores, and on features
    # a deployed agent has (no question type) since --gold-features was not given.
    metrics = json.loads((out / "prm" / "metrics.json").read_text())
    assert metrics["folds"]["k"] == 3 and metrics["oof_auroc"] == metrics["validation"]["auroc"]  # --quick: 3
    oof = pl.read_parquet(out / "prm" / "oof_scores.parquet")
    labels = pl.read_parquet(out / "solve" / "labels.parquet").join(oof, on=["episode_id", "step"], suffix="_oof")
    assert labels.height == oof.height and (labels["prm_score"] == labels["prm_score_oof"]).all()
    assert not any(k.startswith("type_") for k in number_map_keys(labels["features"]))
    assert not any(n.startswith("f_type_") for n in _helper_features(out))
    assert summary["router"]["features"] and not any("type_" in n for n in summary["router"]["features"])

    # The evidence script's tables read this folder: the helper's row unpaired, the others paired
    # against it on the same held-out episodes, and the PRM's out-of-fold AUROC.
    evidence = benchmark_module("evidence")
    text = evidence.tables([out])
    assert "| helper | " in text and "| random | " in text and "Δ " in text
    assert f"| {out.name} | label_proposal | {metrics['oof_auroc']:.3f} |" in text

    # The priced helper is on the default sweep, at each target spend with no cap, and the threshold baselines' no-cap
    # curves reach its spend; a resweep plays the same episodes.
    priced = sweep.filter(pl.col("method") == "helper_priced")
    assert sorted(priced["budget"].to_list()) == [1, 2]
    assert all(r["mix"] is not None for method in ("prm_threshold", "router", "knn")
               for r in summary["at_spend"][method].values())
    benchmark_module("resweep").main([str(out), "again", "helper", "--backend", "table"])
    episodes = {name: pl.read_csv(out / name / "episodes.csv").filter(pl.col("method") == "helper")
                for name in ("sweep", "again")}
    assert episodes["again"]["episode_id"].to_list() == episodes["sweep"]["episode_id"].to_list()

    capsys.readouterr()
    assert main(args) == 0  # every stage is marked finished: nothing is redone
    printed = capsys.readouterr().out
    assert all(f"{stage}: already finished" in printed for stage in STAGES)
    # Other settings on the same folder: refused in one line before any work, the folder as it was.
    stored = (out / "pipeline.json").read_text()
    assert main([*args, "--bins", "8"], experiments=True) == 2  # --bins: an experiment's option of the pipeline
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "stage solve finished with --bins 6" in error[0]
    assert (out / "pipeline.json").read_text() == stored


def test_gold_features_ablation_reaches_the_helper(tmp_path):
    out = tmp_path / "gold"
    args = ["pipeline", "--out", str(out), "--quick", "--agent", "simulator", "--prm-model", "tiny",
            "--episodes", "16", "--eval-episodes", "4", "--questions-per-episode", "3", "--budgets", "1",
            "--gold-features", "--decide-after", "state", "--methods", "helper", "router"]
    assert main(args, experiments=True) == 0  # an ablation: the experiment entry's
    gold = {"f_type_fact_qa", "f_type_search_qa", "f_type_reasoning_qa"}
    assert gold <= set(_helper_features(out))
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert gold <= set(summary["router"]["features"])  # the ablation switches them on for every reader
    assert summary["decide_after"] == "state"
    # --methods: the sweep plays those (and never / always, which PGR needs; the router also with no cap) and nothing
    # else.
    assert set(pl.read_csv(out / "sweep" / "sweep.csv")["method"]) == {"helper", "router", "router_nocap", "never",
                                                                       "always"}


def test_online_rl_is_left_out_only_for_an_llm_agent_by_default():
    from dataclasses import replace

    from helper.commands.pipeline import PipelineConfig, llm_agent, sweep_methods

    main = PipelineConfig()
    assert llm_agent(main.spec) and "online_rl" not in sweep_methods(main, llm_agent(main.spec))
    named = replace(main, methods=["helper", "online_rl"])
    assert sweep_methods(named, llm_agent(named.spec)) == ["helper", "online_rl"]
    plugin = replace(main, spec=replace(main.spec, env="examples.rapids:make_episodes",
                                        agent="examples.rapids:make_agent"))
    assert not llm_agent(plugin.spec) and "online_rl" in sweep_methods(plugin, llm_agent(plugin.spec))
    simulator = replace(main, spec=replace(main.spec, agent="simulator"))
    assert "online_rl" in sweep_methods(simulator, llm_agent(simulator.spec))
