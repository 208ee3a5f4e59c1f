"""The fold heads' mean as the gate's head: new steps scored by the very heads that wrote the out-of-fold scores."""

import numpy as np
import polars as pl
import pytest

from prm.data.episodes import OOF_FILE, episodes_of
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from prm.verifiers.load import load_prm
from prm.verifiers.model import FoldMeanHead, read_settings
from helper_data import complete_folder


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


FRAME = synthetic_frame(episodes=24, steps=2, words_per_state=6, p_good=0.7, seed=3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("fold-mean")
    data = complete_folder(FRAME, root / "data")
    run_train(TrainConfig(data=str(data), out=str(root / "prm"), model="tiny", target="hard", folds=3,
                          fold_mean=True, head_steps=100, progress=False, calibration="none"))
    return root


def test_each_saved_fold_head_rescores_its_own_fold_as_the_out_of_fold_file_says(trained):
    assert read_settings(trained / "prm").fold_heads == 3
    prm = load_prm(trained / "prm")
    assert isinstance(prm.head, FoldMeanHead) and len(prm.head.heads) == 3
    ids, episodes = episodes_of(FRAME)
    oof = pl.read_parquet(trained / "prm" / OOF_FILE).sort(["episode_id", "step"])
    mean = prm.head
    per_head = []
    for k, head in enumerate(mean.heads):
        prm.head = head
        scores = np.concatenate(prm.score_episodes(episodes))
        per_head.append(scores)
        fold = (oof["fold"] == k).to_numpy()
        assert fold.any()
        np.testing.assert_allclose(scores[fold], oof["prm_score"].to_numpy()[fold], atol=1e-5)
    prm.head = mean
    np.testing.assert_allclose(np.concatenate(prm.score_episodes(episodes)), np.mean(per_head, axis=0), atol=1e-5)


def test_the_fold_mean_needs_folds(tmp_path):
    data = complete_folder(FRAME, tmp_path / "data")
    with pytest.raises(ValueError, match="fold_mean"):
        run_train(TrainConfig(data=str(data), out=str(tmp_path / "prm"), model="tiny", target="hard", folds=1,
                              fold_mean=True, progress=False))


def test_a_word_reading_head_can_be_the_fold_mean_too(tmp_path):
    # The verifier choice trains a word-reading candidate beside the others; with --prm-fold-mean it is a mean too.
    data = complete_folder(FRAME, tmp_path / "data")
    run_train(TrainConfig(data=str(data), out=str(tmp_path / "prm"), model="tiny", target="hard", folds=3,
                          fold_mean=True, word_features=True, hidden=False, head_steps=50, progress=False,
                          calibration="none"))
    assert read_settings(tmp_path / "prm").fold_heads == 3
    prm = load_prm(tmp_path / "prm")
    assert isinstance(prm.head, FoldMeanHead) and len(prm.head.heads) == 3
    scores = np.concatenate(prm.score_episodes(episodes_of(FRAME)[1]))
    assert np.isfinite(scores).all() and ((scores > 0) & (scores < 1)).all()
