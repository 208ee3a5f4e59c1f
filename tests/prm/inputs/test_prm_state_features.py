"""The PRM reading the environment's state features beside the hidden state (``--state-features``)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from agile.protocol import Observation
from prm.verifiers.load import load_prm
from prm.training.quality import auroc
from prm.scoring.score import ScoreConfig, run_score
from prm.inputs.signals import SIGNALS_COLUMN, signal_matrix, state_keys
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from trajectories.number_maps import number_maps
from trajectories.shards import mark_complete
from helper_data import complete_folder


def _state_frame(episodes: int, seed: int) -> pl.DataFrame:
    """One-step episodes in 7 'games' whose outcome follows a state feature, with game base rates in
    the text that do not carry over: what the out-of-fold score must not learn."""
    frame = synthetic_frame(episodes=episodes, steps=1, p_good=0.5, seed=seed)
    rng = np.random.default_rng(seed + 100)
    steps_left = rng.integers(0, 20, size=frame.height).astype(float)
    won = (steps_left + rng.normal(0, 2, size=frame.height) > 10).astype(float)
    cells = [json.dumps({"steps_left": s, "noise": float(rng.random())}) for s in steps_left]
    return frame.with_columns(pl.Series("success", won), pl.Series("reward", won), pl.Series("features", cells))


def test_state_keys_and_matrix_read_the_features_column():
    frame = pl.DataFrame({"features": ['{"progress": 0.5, "steps_left": 3}', "{}"],
                          SIGNALS_COLUMN: ['{"margin": 1.0}', "{}"]})
    assert state_keys(frame) == ["state:progress", "state:steps_left"]
    matrix = signal_matrix(frame, ["margin", "state:steps_left", "state:progress"])
    np.testing.assert_array_equal(matrix, [[1.0, 3.0, 0.5, 0, 0, 0], [0, 0, 0, 1, 1, 1]])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread):
    root = tmp_path_factory.mktemp("state")
    frame = _state_frame(140, seed=2)
    data = complete_folder(frame, root / "data")
    common = {"data": str(data), "model": "tiny", "target": "hard", "tag_after": "state", "progress": False,
              "feature_cache": str(root / "features.npz")}
    reports = {
        "hidden": run_train(TrainConfig(out=str(root / "hidden"), **common)),
        "state": run_train(TrainConfig(out=str(root / "state"), state_features=True, **common)),
        "state only": run_train(TrainConfig(out=str(root / "state_only"), state_features=True, hidden=False, **common)),
    }
    return root, reports


def test_state_features_rank_held_out_groups_and_the_gate_reads_them(trained, tmp_path):
    from prm.scoring.scorer import PrmScorer

    root, reports = trained
    assert reports["state"]["signals"] == ["state:noise", "state:steps_left"]
    assert reports["hidden"]["signals"] is None
    assert reports["hidden"]["oof_auroc"] < 0.7
    assert reports["state"]["oof_auroc"] > 0.85 and reports["state only"]["oof_auroc"] > 0.85
    fresh = _state_frame(16, seed=9).with_columns(pl.col("episode_id").str.replace("synthetic", "fresh"))
    for name in ("state", "state_only"):
        # New episodes: prm score and the gate (which reads Observation.features) give the same scores.
        prm = load_prm(root / name)
        assert prm.settings.hidden_inputs == (name == "state")
        new = tmp_path / name
        new.mkdir()
        fresh.write_parquet(new / "part-000.parquet")
        mark_complete(new)
        run_score(ScoreConfig(data=str(new), model=str(root / name), progress=False))
        logged = pl.read_parquet(new / "part-000.parquet")
        assert auroc(logged["prm_score"], logged["success"]) > 0.85
        scorer = PrmScorer(prm)
        online = [scorer.score(Observation(row["episode_id"], "synthetic", row["task_id"], 0, row["state_text"], 1,
                                           features))
                  for row, features in zip(logged.iter_rows(named=True), number_maps(logged["features"]))]
        np.testing.assert_allclose(online, logged["prm_score"].to_numpy(), atol=1e-5)


def test_state_features_are_refused_without_features(tmp_path):
    frame = synthetic_frame(episodes=12, steps=1, seed=1)
    with pytest.raises(ValueError, match="no state features"):
        run_train(TrainConfig(out=str(tmp_path), model="tiny", state_features=True, progress=False), frame=frame)
    with pytest.raises(ValueError, match="hidden_inputs=False"):  # nothing left to read
        run_train(TrainConfig(out=str(tmp_path), model="tiny", hidden=False, progress=False), frame=frame)


def test_the_pipeline_reads_state_features_alone_on_textworld_only():
    from helper.commands.pipeline import PipelineConfig
    from helper.data.environment import EnvSpec

    textworld = PipelineConfig(spec=EnvSpec(env="textworld")).prm_train_config("t", "p")
    assert (textworld.state_features, textworld.hidden) == (True, False)
    productqa = PipelineConfig().prm_train_config("t", "p")
    assert (productqa.state_features, productqa.hidden) == (False, True)
    chosen = PipelineConfig(spec=EnvSpec(env="textworld"), prm_hidden=True, prm_state_features=False).prm_train_config("t", "p")
    assert (chosen.state_features, chosen.hidden) == (False, True)


def test_the_pipeline_passes_the_proposal_features_flag_to_its_prm():
    from helper.commands.pipeline import PipelineConfig
    from helper.config_cli import parse_config

    assert PipelineConfig().prm_train_config("t", "p").proposal_features is False
    cfg = parse_config(PipelineConfig, ["--prm-proposal-features", "--prm-hidden", "False"], experiments=True)
    train = cfg.prm_train_config("t", "p")
    assert (train.proposal_features, train.hidden, train.tag_after) == (True, False, "proposal")
