"""Configs stored in run folders read back: old flat keys and renamed budget words map in one place
(helper.stored_config), an old flag is refused in one line, and the CLI flags users know stay."""

from __future__ import annotations

import json

import pytest

from helper.commands.cli import main
from helper.commands.pipeline import PipelineConfig
from helper.config_cli import parse_config
from helper.data.collect import CollectConfig
from helper.data.environment import EnvSpec
from helper.evaluation.sweep import SweepConfig
from helper.stored_config import config_of, flat, renamed

# pipeline.json as a run of the release before EnvSpec was nested wrote it (every field flat).
OLD_PIPELINE = {
    "out": "runs/old", "quick": True, "env": "productqa", "agent": "smollm2", "data": None, "episodes": None,
    "eval_episodes": None, "questions_per_episode": 4, "max_budget": 3, "agent_dtype": "auto",
    "consistency_samples": 0, "prm_model": "smollm2", "prm_lora": False, "decide_after": "proposal",
    "prm_target": None, "prm_layers": None, "prm_state_features": None, "prm_hidden": None, "prm_pooling": "last",
    "prm_folds": None, "bins": 6, "rl_use_prm": False, "backend": "features", "gold_features": True,
    "methods": None, "seed": 2, "redo": False, "device": "cpu",
}


def test_an_old_flat_pipeline_config_loads_nested_with_its_budgets():
    cfg = config_of(PipelineConfig, OLD_PIPELINE, where="runs/old/pipeline.json")
    assert cfg.spec == EnvSpec(agent="smollm2", questions_per_episode=4, gold_features=True, device="cpu")
    assert cfg.budgets == [1, 2, 3] and cfg.seed == 2 and cfg.decide_after == "proposal"
    # Stored again it is flat, spelled as the command line, with the new word only.
    stored = flat(cfg)
    assert "spec" not in stored and stored["env"] == "productqa" and stored["budgets"] == [1, 2, 3]
    assert "max_budget" not in stored and config_of(PipelineConfig, stored) == cfg
    assert set(stored) == set(OLD_PIPELINE) - {"max_budget"} | {"budgets"} | {
        f for f in flat(EnvSpec()) if f not in OLD_PIPELINE} | {"prm_proposal_features", "solve_pessimism", "cross_fit",
                                                                 "solve_time_axis",
                                                                 "counterfactual", "binning",
                                                                 "prm_evidence_features",
                                                                 "prm_question_vector", "prm_fold_mean",
                                                                 "prm_word_features",
                                                                 "help_kinds"}  # the fields it gained
    # What a pipeline of that release ran:
    assert cfg.prm_proposal_features is False and cfg.solve_pessimism == 0.0 and cfg.binning == "quantile"
    unset = config_of(PipelineConfig, OLD_PIPELINE | {"max_budget": None})
    assert unset.budgets is None  # no largest budget: the default range


def test_old_sweep_agile_and_helper_keys_map_to_the_one_word():
    sweep = config_of(SweepConfig, {"env": "textworld", "tw_quest_lengths": [3, 4], "max_budget": 2, "split": "test"})
    assert sweep.budgets == [0, 1, 2] and sweep.spec.tw_quest_lengths == (3, 4) and sweep.split == "test"
    assert renamed({"max_budget": None}, "SweepConfig")["budgets"] is None
    assert renamed({"gate_budget": 0.25, "questions_per_group": 20}, "AgileEvalConfig")["budget"] == 5
    assert renamed({"max_budget": 3}, "helper.json") == {"solved_budget": 3}
    # distill's "which solved table", stored in helper.json's distill_config, was spelled budget.
    from helper.solve.distill import DistillConfig

    assert config_of(DistillConfig, {"labels": "s", "budget": 2}).solved_budget == 2
    assert "budget" not in flat(config_of(DistillConfig, {"budget": None}))
    # An old sweep pools with a new one: the keys the nesting added read as the old sweeps ran.
    assert renamed({"env": "productqa"}, "SweepConfig") == {"env": "productqa", "max_new_tokens": 96,
                                                            "decoding": "free"}


def test_an_old_key_beside_its_new_one_with_another_value_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"runs/x/pipeline.json: holds both max_budget=2 .*budgets=\[1, 2\]\) "
                                         r"and budgets=\[1, 2, 3\]; delete one"):
        config_of(PipelineConfig, {"max_budget": 2, "budgets": [1, 2, 3]}, where="runs/x/pipeline.json")
    assert config_of(PipelineConfig, {"max_budget": 2, "budgets": [1, 2]}).budgets == [1, 2]  # they agree


def test_an_old_helper_folder_with_max_budget_loads(tmp_path):
    from helper_data import NAMES, classifier

    from helper import HelperGate

    folder = tmp_path / "helper"
    HelperGate("features", classifier(NAMES[1:]), solved_budget=2).save(folder)
    path = folder / "helper.json"
    stored = json.loads(path.read_text())
    assert stored["solved_budget"] == 2 and "max_budget" not in stored
    stored["max_budget"] = stored.pop("solved_budget")  # as helpgate distill wrote it before
    path.write_text(json.dumps(stored))
    gate = HelperGate.load(folder)
    assert gate.solved_budget == 2 and gate.budget == 2


@pytest.mark.parametrize("argv, new", [
    (["pipeline", "--max-budget", "3"], "--budgets"),
    (["sweep", "--max-budget=2"], "--budgets"),
    (["agile", "eval", "--gate-budget", "0.25"], "--budget"),
    # --budget is an episode's cap in every command; solve's list and distill's solved table say so.
    (["solve", "--budget", "1", "2"], "--budgets"),
    (["distill", "--budget=2"], "--solved-budget"),
])
def test_an_old_flag_is_refused_in_one_line_naming_the_new_one(argv, new, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "was renamed: use " + new in err and "Traceback" not in err


def test_the_flags_users_know_fill_the_nested_spec():
    cfg = parse_config(CollectConfig, ["--env", "agile", "--agent", "tiny", "--data", "d",
                                       "--groups", "a", "b", "--questions-per-episode", "3", "--budget", "1"])
    assert cfg.spec == EnvSpec(env="agile", agent="tiny", data="d", questions_per_episode=3)
    assert cfg.groups == ["a", "b"] and cfg.budget == 1
    # Experiment options (helper.experiment_options) fill the same nested spec on the experiment entry's line.
    cfg = parse_config(CollectConfig, ["--agent", "llm", "--model", "tiny", "--sim-accuracy", "0.5"], experiments=True)
    assert cfg.spec == EnvSpec(agent="llm", sim_accuracy=(0.5,)) and cfg.model == "tiny"
    pipeline = parse_config(PipelineConfig, ["--env", "textworld", "--tw-quest-lengths", "3", "--budgets", "1", "2"],
                            experiments=True)
    assert pipeline.spec.tw_quest_lengths == (3,) and pipeline.spec.agent == "smollm2"  # the pipeline's default
    assert pipeline.budgets == [1, 2]
    sweep = parse_config(SweepConfig, ["--agent", "smollm2", "--budgets", "0", "2", "--split", "train"],
                         experiments=True)
    assert sweep.spec.agent == "smollm2" and sweep.budgets == [0, 2] and sweep.split == "train"
