"""The training folds choose whether a plug-in environment's verifier reads its state features: on the arithmetic
chain the features name the hard steps (a multiplication, the total's digits), which a tiny random backbone's hidden
state does not, and the head that reads them is chosen; an environment without features is offered no such head."""

from __future__ import annotations

import json

import pytest

from helper.commands.choose import choose
from helper.commands.pipeline import PipelineConfig
from helper.data import collect
from helper.data.environment import EnvSpec


def collected(tmp_path, env: str, agent: str):
    spec = EnvSpec(env=env, agent=agent)
    data = tmp_path / "trajectories"
    collect.run(collect.CollectConfig(spec=spec, split="train", episodes=48, budget=2, explore_p=[0.0, 0.3],
                                      seed=0, out=str(data), shard_size=16))
    return spec, str(data)


def test_the_verifier_reads_the_state_features_where_the_training_folds_say_they_rank(tmp_path, one_torch_thread):
    spec, data = collected(tmp_path, "examples.arith_chain:make_episodes", "examples.arith_chain:make_agent")
    cfg = PipelineConfig(spec=spec, prm_model="tiny", prm_target="process", prm_pooling="mean", prm_folds=3, seed=0)
    assert cfg.chooses_state_features()
    choice = choose(cfg, data, tmp_path / "choose", [1, 2])
    by_features = {(c["state_features"], c["word_features"], c["binning"]): c for c in choice["candidates"]}
    assert set(by_features) == {(f, w, b) for f, w in ((False, False), (True, False), (False, True))
                                for b in ("quantile", "supervised")}
    reads, blind = by_features[(True, False, "quantile")], by_features[(False, False, "quantile")]
    assert reads["prm_oof_auroc"] > max(0.75, blind["prm_oof_auroc"] + 0.05)
    best = max(choice["candidates"], key=lambda c: c["mean_held_out_success"])
    assert choice["state_features"] is best["state_features"] is True
    assert json.loads((tmp_path / "choose" / "choice.json").read_text())["state_features"] is True
    state = json.loads((tmp_path / "choose" / "prm-mean-process-state" / "metrics.json").read_text())
    assert state["oof_auroc"] == pytest.approx(reads["prm_oof_auroc"])


def test_no_state_feature_head_where_the_user_chose_or_the_env_has_none(tmp_path):
    arith = EnvSpec(env="examples.arith_chain:make_episodes", agent="examples.arith_chain:make_agent")
    assert not PipelineConfig(spec=arith, prm_model="tiny", prm_state_features=False).chooses_state_features()
    assert not PipelineConfig(spec=arith, prm_model="tiny", prm_target="process", prm_pooling="mean",
                              binning="quantile").chooses_state_features()  # nothing left to choose
    assert not PipelineConfig(spec=EnvSpec(), prm_model="tiny").chooses_state_features()  # ProductQA: not a plug-in
    spec, data = collected(tmp_path, "examples.plain_cue:make_episodes", "examples.plain_cue:make_agent")
    cfg = PipelineConfig(spec=spec, prm_model="tiny", prm_target="soft", prm_pooling="mean", prm_folds=2, seed=0)
    choice = choose(cfg, data, tmp_path / "choose", [1])
    assert {c["state_features"] for c in choice["candidates"]} == {False}  # its observations carry no features
    assert {c["word_features"] for c in choice["candidates"]} == {False}  # words are tried with step targets only


def test_a_head_on_the_words_is_offered_where_the_text_names_the_risk(tmp_path, one_torch_thread):
    spec, data = collected(tmp_path, "examples.rapids:make_episodes", "examples.rapids:make_agent")
    cfg = PipelineConfig(spec=spec, prm_model="tiny", prm_target="process", prm_pooling="mean", prm_folds=3, seed=0)
    assert cfg.chooses_word_features()
    assert not PipelineConfig(spec=spec, prm_model="tiny", prm_hidden=True).chooses_word_features()
    assert not PipelineConfig(spec=EnvSpec(), prm_model="tiny").chooses_word_features()  # ProductQA: not a plug-in
    forced = PipelineConfig(spec=spec, prm_model="tiny", prm_word_features=True)
    assert not forced.chooses_word_features()  # the user chose
    settings = forced.prm_train_config("t", "p", target="process", pooling="mean")
    assert (settings.word_features, settings.hidden) == (True, False)
    choice = choose(cfg, data, tmp_path / "choose", [1, 2])
    words = [c for c in choice["candidates"] if c["word_features"]]
    assert {c["binning"] for c in words} == {"quantile", "supervised"}
    assert words[0]["prm_oof_auroc"] > 0.7  # the risk word, read out of fold
    metrics = json.loads((tmp_path / "choose" / "prm-mean-process-words" / "metrics.json").read_text())
    assert metrics["signals"] and all(k.startswith("word:") for k in metrics["signals"])
    assert isinstance(choice["word_features"], bool)


def test_a_verifier_is_judged_by_the_best_members_of_its_families_under_a_cap_and_at_a_spend():
    # A chain whose score says exactly which step is risky. The candidate's figure at C is the mean of the best
    # member of distill's family under the cap C (its threshold included) and of the priced family's best within a
    # spend of C: under each yardstick never below the threshold on the same score.
    import numpy as np

    from helper.commands.choose import binning_values
    from helper.solve.select import family_for, priced_family
    from tabular_rl.choice.selection import cross_fitted
    from carried_chains import HORIZON, chain_rows

    rows = chain_rows(5, 120)
    folds = np.array([int(e[1:]) % 4 for e in rows["episode_id"]])
    values = binning_values(rows, folds, [1, 2], 4, ["quantile"])["quantile"]
    family = family_for({"bins": 4, "binning": "quantile"}, rows, [1, 2])
    capped = cross_fitted(rows, folds, family, [1, 2])
    tables = [s for s in family if s.kind == "table" and not s.pessimism]
    assert capped.kind_indices("threshold") and tables
    for j, c in enumerate([1, 2]):
        cap_best = np.nanmax(capped.success[:, j])
        assert cap_best >= np.nanmax(capped.success[capped.kind_indices("threshold"), j])
        free = cross_fitted(rows, folds, priced_family(tables, float(HORIZON), c), [HORIZON])
        within = free.best_within(c, HORIZON)
        thresholds = [i for i in free.kind_indices("threshold") if free.interventions[i, 0] <= c + 0.02]
        assert all(free.success[within, 0] >= free.success[i, 0] - 1e-12 for i in thresholds)
        assert free.interventions[within, 0] <= c + 0.02 or not np.any(free.interventions[:, 0] <= c + 0.02)
        assert values[c] == pytest.approx(0.5 * (cap_best + free.success[within, 0]))
