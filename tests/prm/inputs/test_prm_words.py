"""A verifier on the state text's words alone (``--word-features``, ``prm.inputs.words``): its vocabulary is fixed
without labels, it ranks held-out steps where one word says the risk, every word column is penalised, and
``prm score`` and the gate give the same scores."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from agile.protocol import Observation
from helper_data import complete_folder
from prm.data.synthetic import synthetic_frame
from prm.inputs.signals import signal_matrix
from prm.inputs.words import WORD_PREFIX, penalised_width, word_inputs, word_keys
from prm.scoring.score import ScoreConfig, run_score
from prm.training.train import TrainConfig, run_train
from prm.verifiers.load import load_prm
from trajectories.shards import mark_complete

RISKS = {"calm": 0.05, "tricky": 0.35, "dangerous": 0.8}


def _risk_frame(episodes: int, seed: int) -> pl.DataFrame:
    """One-step episodes whose state names a risk word among filler; the step fails with the word's odds."""
    frame = synthetic_frame(episodes=episodes, steps=1, p_good=0.5, seed=seed)
    rng = np.random.default_rng(seed + 50)
    risk = rng.choice(list(RISKS), size=frame.height)
    failed = rng.random(frame.height) < np.array([RISKS[r] for r in risk])
    texts = [f"{text} The crossing here looks {r}." for text, r in zip(frame["state_text"], risk)]
    won = (~failed).astype(float)
    return frame.with_columns(pl.Series("state_text", texts), pl.Series("success", won), pl.Series("reward", won))


def test_the_vocabulary_leaves_out_rare_and_universal_words():
    texts = ["the river is calm"] * 60 + ["the river is dangerous here"] * 39 + ["the rare word"]
    keys = word_keys(texts)
    # "the" in every text, "is" and "river" in 99 of 100 (over 1 - MIN_SHARE), "rare" in one (under MIN_SHARE)
    assert keys == sorted(WORD_PREFIX + w for w in ("calm", "dangerous", "here"))
    assert word_inputs("The river is CALM, here!", keys) == {"word:calm": 1.0, "word:here": 1.0}
    assert penalised_width(keys + ["state:progress"]) == 2 * len(keys)
    matrix = signal_matrix(pl.DataFrame({"state_text": ["calm river", "dangerous"]}), ["word:calm", "word:dangerous"])
    np.testing.assert_array_equal(matrix, [[1, 0, 0, 1], [0, 1, 1, 0]])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread):
    root = tmp_path_factory.mktemp("words")
    data = complete_folder(_risk_frame(160, seed=3), root / "data")
    common = {"data": str(data), "model": "tiny", "target": "hard", "tag_after": "state", "progress": False,
              "feature_cache": str(root / "features.npz")}
    reports = {
        "hidden": run_train(TrainConfig(out=str(root / "hidden"), **common)),
        "words": run_train(TrainConfig(out=str(root / "words"), word_features=True, hidden=False, **common)),
    }
    return root, reports


def test_words_rank_the_risk_and_the_gate_reads_them_as_logged(trained, tmp_path):
    from prm.scoring.scorer import PrmScorer

    root, reports = trained
    assert {"word:calm", "word:dangerous", "word:tricky"} <= set(reports["words"]["signals"])
    assert reports["words"]["oof_auroc"] > 0.8 and reports["hidden"]["signals"] is None
    prm = load_prm(root / "words")
    assert not prm.settings.hidden_inputs and prm.settings.free_width == 0  # every word column penalised
    fresh = _risk_frame(24, seed=11).with_columns(pl.col("episode_id").str.replace("synthetic", "fresh"))
    new = tmp_path / "fresh"
    new.mkdir()
    fresh.write_parquet(new / "part-000.parquet")
    mark_complete(new)
    run_score(ScoreConfig(data=str(new), model=str(root / "words"), progress=False))
    logged = pl.read_parquet(new / "part-000.parquet")
    scorer = PrmScorer(prm)
    online = [scorer.score(Observation(row["episode_id"], "synthetic", row["task_id"], 0, row["state_text"], 1))
              for row in logged.iter_rows(named=True)]
    np.testing.assert_allclose(online, logged["prm_score"].to_numpy(), atol=1e-5)
    dangerous = [s for s, text in zip(online, logged["state_text"]) if "dangerous" in text]
    calm = [s for s, text in zip(online, logged["state_text"]) if "calm" in text]
    assert max(dangerous) < min(calm)  # a process score: the chance the step goes right


def test_words_read_nothing_else(tmp_path):
    frame = _risk_frame(12, seed=1)
    for extra in ({"hidden": True}, {"hidden": False, "state_features": True}, {"hidden": False, "signals": True}):
        with pytest.raises(ValueError, match="reads the state's words and nothing else"):
            run_train(TrainConfig(out=str(tmp_path), model="tiny", word_features=True, progress=False, **extra),
                      frame=frame)
