"""The registry of environment kinds: complete, consistent, and the collection identity it decides."""

from __future__ import annotations

import pytest
from productqa_slice import SLICE

from helper.data import env_kinds
from helper.data.collect import CollectConfig, env_setup, identity
from helper.data.env_kinds import ENV_KINDS, PLUGIN, EnvKind
from helper.data.environment import ENV_ALIASES, ENVS, EnvSpec
from helper.stored_config import flat

SHARED = ["env", "agent", "strong", "base_url", "device", "agent_dtype", "split", "model", "explore_p", "episodes",
          "budget", "seed", "out", "shard_size", "counterfactual", "decide_after", "batch_size", "ray", "ray_address",
          "ray_workers", "help_kinds", "help_caps", "help_weights"]
"""Collection fields every environment's manifest identity keeps."""
PRODUCTQA_ONLY = ["data", "groups", "questions_per_episode", "sim_accuracy", "memory_boost", "gold_features",
                  "restate_question", "list_advice_with_gate", "yes_no_threshold", "max_new_tokens", "decoding", "memory",
                  "consistency_samples"]
TEXTWORLD_ONLY = ["tw_games", "tw_quest_lengths", "tw_rooms", "tw_objects", "tw_sim_p", "tw_quest_length_feature"]


def test_every_env_has_a_kind_that_builds_its_episodes_and_actors():
    assert ENVS == ("productqa", "textworld") == tuple(ENV_KINDS)
    assert set(ENV_ALIASES.values()) <= set(ENV_KINDS)
    for name, kind in ENV_KINDS.items():
        assert EnvSpec(env=name).kind is kind
        for method in ("source", "base_agent", "strong_actor"):  # the base class has none of its own
            assert getattr(type(kind), method) is not getattr(EnvKind, method), f"{name} lacks {method}"
    assert EnvSpec(env="agile").kind is ENV_KINDS["productqa"]
    assert EnvSpec(env="examples.arith_chain:make_episodes").kind is PLUGIN


def test_each_kinds_own_fields_are_fields_of_the_collection_config():
    config_fields = set(flat(CollectConfig()))
    for name, kind in ENV_KINDS.items():
        assert kind.fields and set(kind.fields) <= config_fields, name
        assert "env" not in kind.fields and len(set(kind.fields)) == len(kind.fields), name


@pytest.mark.parametrize("env, own", [("productqa", PRODUCTQA_ONLY), ("textworld", TEXTWORLD_ONLY),
                                      ("examples.arith_chain:make_episodes", ["plugin_max_steps"])])
def test_collection_identity_keeps_the_shared_fields_and_only_its_own(env, own):
    agent = "examples.arith_chain:make_agent" if own == ["plugin_max_steps"] else "simulator"
    config = CollectConfig(spec=EnvSpec(env=env, agent=agent, data=str(SLICE)))
    ident = identity(config, env_setup(config))
    assert set(ident) == set(SHARED) | set(own)
    if env == "productqa":
        assert ident["data"] == str(SLICE.resolve())  # the resolved root, under any spelling


@pytest.mark.parametrize("env, decide_after, defaults", [
    ("productqa", None, ("proposal", "proposal", True, False, 64)),
    ("productqa", "state", ("state", "process", True, False, 64)),  # a session's question is scored on its own
    ("textworld", None, ("state", "soft", False, True, 960)),
    ("examples.arith_chain:make_episodes", None, ("state", "auto", True, False, 64)),  # chosen on training folds
])
def test_the_pipeline_takes_its_defaults_from_the_kind(env, decide_after, defaults):
    from helper.commands.pipeline import PipelineConfig

    cfg = PipelineConfig(spec=EnvSpec(env=env), decide_after=decide_after)
    assert (cfg.decide_mode(), cfg.prm_target_name(), cfg.hidden_inputs(), cfg.state_features(),
            cfg.sizes()[0]) == defaults
    # --quick and --episodes win over the kind's size.
    assert PipelineConfig(spec=EnvSpec(env=env), quick=True).sizes()[0] == 16
    # Every product group held out once by default on ProductQA (not in a first look), none elsewhere.
    folds = PipelineConfig(spec=EnvSpec(env=env)).fold_count_cross_fit()
    assert folds == (4 if EnvSpec(env=env).kind.question_sessions else 0)
    assert PipelineConfig(spec=EnvSpec(env=env), quick=True).fold_count_cross_fit() == 0
    assert PipelineConfig(spec=EnvSpec(env=env), cross_fit=2).fold_count_cross_fit() == 2
    assert PipelineConfig(spec=EnvSpec(env=env), episodes=5).sizes()[0] == 5


def test_a_name_that_is_no_env_reads_as_a_plug_in_until_checked():
    assert env_kinds.kind_of("no-such-env") is PLUGIN
    with pytest.raises(ValueError, match="env='no-such-env': choose one of"):
        EnvSpec(env="no-such-env").check()


def test_productqa_sources_carry_the_executor_settings_of_the_spec():
    from helper.data.environment import EnvSetup

    for restate, listed, threshold in ((False, False, 0.0), (True, True, -1.25)):
        setup = EnvSetup(EnvSpec(env="productqa", agent="sim", restate_question=restate, list_advice_with_gate=listed,
                                 yes_no_threshold=threshold))
        config = setup.source("train").config
        assert (config.restate_question, config.list_advice_with_gate, config.yes_no_threshold) == (
            restate, listed, threshold)
