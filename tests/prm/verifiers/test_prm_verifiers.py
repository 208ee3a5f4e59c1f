"""Trained verifiers: LoRA adapters and a cross-encoder fine-tuned whole, out of fold by group, on tiny
random-initialised models with the real tokenizers; saved and scored by `prm score` and the gate."""

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agile.protocol import Observation
from helper.commands.cli import main
from prm.data.episodes import episodes_of
from prm.data.folds import assign_folds, task_group
from prm.verifiers.load import load_prm
from prm.scoring.scorer import PrmScorer
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from trajectories.shards import mark_complete

# Group names of the shared ProductQA train split and of the generated catalog.
PRODUCTQA_GROUPS = ["blades", "blu_ray_players", "camera_lenses", "cell_phones", "coffee_machines", "digital_scales",
                    "dresses", "everyday_bras", "grips", "gun_holsters", "handheld_flashlights", "headlight_bulbs",
                    "headphones", "litter", "mice", "point_and_shoot_digital_cameras", "portable_power_banks",
                    "printers", "space_heaters", "wrist_watches", "gen_desk_lamps", "gen_kettles", "gen_tents"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


def _grouped(frame: pl.DataFrame, groups: list[str]) -> pl.DataFrame:
    """The synthetic frame with ProductQA-style task ids: each episode in one product group."""
    ids = frame["episode_id"].unique(maintain_order=True).to_list()
    group_of = {e: groups[i % len(groups)] for i, e in enumerate(ids)}
    return frame.with_columns(pl.Series("task_id", [f"{group_of[e]}/fact_qa_{s}" for e, s in
                                                    zip(frame["episode_id"], frame["step"])]))


FRAME = _grouped(synthetic_frame(episodes=36, steps=(2, 3), words_per_state=4, seed=1), PRODUCTQA_GROUPS[:9])


@pytest.fixture(scope="module", params=["lora", "encoder"])
def trained(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    # The random tiny encoder needs more, smaller steps than the LoRA'd tiny LLM to find the cue word.
    mode = (dict(model="tiny", lora=True, history=0, epochs=3, step_tokens=512) if request.param == "lora" else
            dict(model="encoder:tiny", epochs=4, step_tokens=128))
    # The tag after the state: what a gate scores before the action (tag_after="action" would read it).
    report = run_train(TrainConfig(data="synthetic", out=str(out), folds=3, lr=3e-3, head_lr=1e-3,
                                   tag_after="state", progress=False, **mode), frame=FRAME)
    return request.param, out, report


def test_trains_out_of_fold_by_group_and_learns_the_cue(trained):
    mode, out, report = trained
    assert report["folds"]["k"] == 3 and report["oof_auroc"] > 0.75, report["oof_auroc"]
    assert len(report["fine_tune"]["fold_seconds"]) == 3 and report["fine_tune"]["all_data_seconds"] > 0
    assert np.mean(report["losses"][-3:]) < np.mean(report["losses"][:3])  # the end-to-end steps learned
    folds = json.loads((out / "split.json").read_text())["folds"]
    fold_of_group = {}
    for episode, task in FRAME.group_by("episode_id").agg(pl.col("task_id").first()).iter_rows():
        assert fold_of_group.setdefault(task_group(task), folds[episode]) == folds[episode]
    oof = pl.read_parquet(out / "oof_scores.parquet")
    assert oof.height == FRAME.height and oof["prm_score_raw"].is_finite().all()
    # Each fold's held-out scores were saved as it finished (a stopped CPU run keeps them): the same numbers.
    saved = pl.concat([pl.read_parquet(out / "fold_scores" / f"fold{k}.parquet") for k in range(3)])
    joined = oof.join(saved.select("episode_id", "step", pl.col("prm_score_raw").alias("saved")),
                      on=["episode_id", "step"])
    assert joined.height == FRAME.height
    np.testing.assert_allclose(joined["saved"].to_numpy(), joined["prm_score_raw"].to_numpy(), atol=1e-6)
    assert not (out / "features.npz").exists()  # no frozen features: the backbone moved
    # Saved only as safetensors (no pickle): LoRA as an adapter over the tiny copy, the encoder whole.
    assert not list(out.rglob("*.bin")) and not list(out.rglob("*.pt")) and list(out.rglob("*.safetensors"))
    settings_ = json.loads((out / "prm_config.json").read_text())
    assert settings_["encoder"] == (mode == "encoder") and settings_["lora"] == (mode == "lora")


def test_reloads_to_the_same_scores_and_the_gate_scores_as_prm_score(trained, tmp_path):
    mode, out, _ = trained
    _, episodes = episodes_of(FRAME.head(12))
    first, again = load_prm(out), load_prm(out)
    expected = first.score_episodes(episodes)
    for a, b in zip(expected, again.score_episodes(episodes)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # The gate's decision-time path (one window per decision) gives prm score's numbers.
    scorer = PrmScorer(load_prm(out, merge_lora=True))
    states, actions = episodes[0]
    online = []
    for t, state in enumerate(states):
        observation = Observation("e", "test", "t", t, state, len(states), {})
        online.append(scorer.score(observation))
        scorer.record_action(observation, actions[t])
    np.testing.assert_allclose(online, expected[0], atol=1e-5)
    # `prm score` gives a new episode the all-data model's score, a training one its out-of-fold score.
    data = tmp_path / "data"
    data.mkdir()
    FRAME.write_parquet(data / "part-0.parquet")
    mark_complete(data)
    assert main(["prm", "score", "--data", str(data), "--model", str(out), "--no-progress"]) == 0
    scored = pl.read_parquet(data / "part-0.parquet").sort(["episode_id", "step"])
    oof = pl.read_parquet(out / "oof_scores.parquet").sort(["episode_id", "step"])
    np.testing.assert_allclose(scored["prm_score"].to_numpy(), oof["prm_score"].to_numpy(), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(PRODUCTQA_GROUPS), min_size=6, max_size=40), st.integers(2, 6), st.integers(0, 99))
def test_folds_never_split_a_product_group(groups, k, seed):
    rows = [{"episode_id": f"ep{i}", "task_id": f"{g}/fact_qa_{i}", "prefix_key": f"k{i}-{s}"}
            for i, g in enumerate(groups) for s in range(2)]
    frame = pl.DataFrame(rows)
    if len(set(groups)) < k:  # fewer groups than folds: folds by episode (prm.data.folds, tested in test_prm_oof)
        return
    folds = assign_folds(frame, k, seed).fold
    seen = {}
    for i, g in enumerate(groups):
        assert seen.setdefault(g, folds[f"ep{i}"]) == folds[f"ep{i}"]
    assert len(set(folds.values())) == k


def test_generated_catalog_groups_stay_in_one_fold():
    from agile.envs.catalog_generator import default_catalog_dir
    from agile.executor.episode import make_episodes

    episodes = make_episodes(default_catalog_dir(0), "train", n=24, seed=3, questions_per_episode=2)
    # Each episode's first question names its product group ("gen_kettles/fact_qa_3").
    frame = pl.DataFrame([{"episode_id": e.episode_id, "task_id": e.observe().task_id, "prefix_key": e.episode_id}
                          for e in episodes])
    folds = assign_folds(frame, 3, 0)
    assert folds.how.startswith("task group")
    by_group = {}
    for episode, task in zip(frame["episode_id"], frame["task_id"]):
        assert by_group.setdefault(task_group(task), folds.fold[episode]) == folds.fold[episode]
    assert len(by_group) >= 3 and all(g.startswith("gen_") for g in by_group)


def test_bad_backbones_end_in_one_line_naming_the_option(tmp_path, capsys):
    from one_line_errors import one_error_line

    data = tmp_path / "data"
    data.mkdir()
    synthetic_frame(episodes=6, seed=0).write_parquet(data / "part-0.parquet")
    mark_complete(data)
    missing = tmp_path / "nowhere"
    assert main(["prm", "train", "--data", str(data), "--out", str(tmp_path / "a"), "--lora",
                 "--model", str(missing)]) == 2
    line = one_error_line(capsys)
    assert "--model" in line and "is not there" in line
    assert main(["prm", "train", "--data", str(data), "--out", str(tmp_path / "b"),
                 "--model", f"encoder:{missing}"]) == 2
    assert "--model encoder:" in one_error_line(capsys)
    # A model folder without its tokenizer.
    from transformers import BertConfig, BertModel

    bare = tmp_path / "bare"
    BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)).save_pretrained(bare)
    assert main(["prm", "train", "--data", str(data), "--out", str(tmp_path / "c"), "--model", f"encoder:{bare}"]) == 2
    line = one_error_line(capsys)
    assert "--model" in line and "has no tokenizer" in line
    assert main(["pipeline", "--out", str(tmp_path / "run"), "--agent", "simulator", "--prm-model",
                 f"encoder:{bare}"]) == 2
    assert "--prm-model" in one_error_line(capsys)
    assert not (tmp_path / "run" / "trajectories").exists()  # refused before collecting anything
    assert main(["pipeline", "--out", str(tmp_path / "run2"), "--agent", "simulator", "--prm-lora",
                 "--prm-model", str(missing)], experiments=True) == 2
    assert "--prm-model" in one_error_line(capsys)


def test_pipeline_with_a_cross_encoder_prm(tmp_path):
    out = tmp_path / "run"
    assert main(["pipeline", "--out", str(out), "--quick", "--agent", "simulator", "--prm-model", "encoder:tiny",
                 "--episodes", "16", "--eval-episodes", "4", "--questions-per-episode", "3", "--budgets", "1",
                 "--methods", "helper", "random"]) == 0
    settings_ = json.loads((out / "prm" / "prm_config.json").read_text())
    assert settings_["encoder"] and settings_["history"] == 0
    metrics = json.loads((out / "prm" / "metrics.json").read_text())
    assert metrics["folds"]["k"] == 3 and len(metrics["fine_tune"]["fold_seconds"]) == 3
    summary = json.loads((out / "sweep" / "summary.json").read_text())
    assert summary["prm_scores"]["forward"] > 0  # the gate scored decisions with the cross-encoder
