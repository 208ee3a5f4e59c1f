"""The evidence verifier: the proposal checked against the record the sentence encoder retrieves
(``prm.inputs.evidence``), and the question's vector in the value head (``prm train --evidence-features
--question-vector``)."""

from __future__ import annotations

import zlib

import numpy as np
import polars as pl
import pytest

from agile.protocol import Action, Observation
from prm.data.synthetic import synthetic_frame
from prm.inputs.evidence import KEYS, evidence_features, focus_text, question_vectors
from prm.scoring.score import ScoreConfig, run_score
from prm.training.quality import auroc
from prm.training.train import TrainConfig, run_train
from prm.verifiers.model import ProcessRewardModel
from helper_data import complete_folder

SCHEMA = ("Table `pans` (20 products). Columns:\nproduct_id TEXT -- the product's asin\ntitle TEXT\n"
          "price REAL -- 4.98 to 99.95 dollar\nbrand TEXT -- values: Presto, Bialetti, Lodge, ...\n"
          "color TEXT -- values: black, grey, silver\n\"Dishwasher Safe\" TEXT -- values: yes, no\n")
STATE = (SCHEMA + "[GetQuestion] {question}\n"
         "Product B000000001: Lodge Cast Iron Skillet (price: 13.99; brand: Lodge; color: black; "
         "Dishwasher Safe: no; Oven Safe: yes)\n[RetrieveMemory]\nKnowledge: none\nHistory: {history}\n")


def bag_of_words(texts: list[str]) -> np.ndarray:
    """A real, deterministic encoder for exact checks: unit vectors of hashed word counts."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().replace(":", " ").replace("?", " ").split():
            out[i, zlib.crc32(word.rstrip("s").encode()) % 64] += 1.0
        out[i] /= max(np.linalg.norm(out[i]), 1e-9)
    return out


def test_yes_no_answers_are_checked_against_the_nearest_detail_and_the_memory():
    history = "Q: Can this skillet go in the dishwasher? A: No, wash it by hand. | Q: Is it heavy? A: yes"
    state = STATE.format(question="Can I put this skillet in the dishwasher?", history=history)
    said_yes = evidence_features(state, "[PredictAnswer] yes", bag_of_words)
    said_no = evidence_features(state, "[PredictAnswer] no", bag_of_words)
    # The nearest detail is "Dishwasher Safe: no": it contradicts yes, supports no.
    assert (said_yes["detail_top_yesno"], said_yes["detail_top_agrees"], said_no["detail_top_agrees"]) == (1, -1, 1)
    assert said_yes["detail_weighted_agrees"] < 0 < said_no["detail_weighted_agrees"]
    assert said_yes["detail_top_sim"] == said_no["detail_top_sim"] > 0
    # The nearest past question is the dishwasher one, answered no by a person.
    assert (said_yes["memory_agrees"], said_no["memory_agrees"]) == (-1, 1)
    assert said_yes["memory_top_sim"] > 0.5
    # Not a search: the SQL features stay 0.
    assert said_yes["sql_conditions"] == said_yes["sql_grounded"] == said_yes["sql_order_mismatch"] == 0


def test_a_search_is_checked_against_the_values_the_question_names():
    state = STATE.format(question="I want Presto or Bialetti, not grey. Which is the cheapest?", history="none")
    ungrounded = "[SearchProduct] SELECT product_id FROM `pans` WHERE brand = 'Lodge' AND color = 'black';"
    grounded = ("[SearchProduct] SELECT product_id FROM `pans` WHERE brand IN ('Presto', 'Bialetti') "
                "AND color != 'grey' ORDER BY price LIMIT 1;")
    bad, good = (evidence_features(state, p, bag_of_words) for p in (ungrounded, grounded))
    assert bad["question_values"] == good["question_values"] == pytest.approx(np.log1p(3))  # presto, bialetti, grey
    assert bad["question_superlative"] == 1
    assert (bad["sql_grounded"], bad["sql_missed"], bad["sql_order_mismatch"]) == (0, 1, 1)
    assert (good["sql_grounded"], good["sql_missed"], good["sql_order_mismatch"]) == (1, 0, 0)
    assert bad["sql_conditions"] == pytest.approx(np.log1p(2)) and good["sql_conditions"] == pytest.approx(np.log1p(3))
    assert good["sql_condition_sim"] > bad["sql_condition_sim"]
    # Nothing to read: every feature 0, nothing breaks.
    assert set(evidence_features("", "", bag_of_words).values()) == {0.0}


def test_the_embedded_encoder_retrieves_the_detail_the_question_asks_about():
    from prm.inputs.evidence import embedded_encoder

    state = STATE.format(question="Is it safe to clean in a dishwasher?", history="none")
    found = evidence_features(state, "[PredictAnswer] yes", embedded_encoder())
    assert found["detail_top_yesno"] == 1 and found["detail_top_agrees"] == -1  # Dishwasher Safe: no
    vectors = question_vectors([state, "no question here\nlast line"])
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert focus_text("no question here\nlast line") == "last line"


def _frame(episodes: int, seed: int) -> pl.DataFrame:
    """One-step proposal-mode episodes in 7 groups: a yes to a question about dish washing machines is right exactly
    where the record's "Dishwasher Safe" says yes (no word of the question names it, so the proposal's form and its
    word-overlap check are blind), and a yes to a question about baking is always right."""
    frame = synthetic_frame(episodes=episodes, steps=1, p_good=0.5, seed=seed)
    rng = np.random.default_rng(seed + 5)
    safe = rng.random(frame.height) < 0.5
    oven = rng.random(frame.height) < 0.5
    states = [STATE.format(question="Will it survive baking at high heat?" if o else
                           "Can it be cleaned in an automatic dish washing machine?",
                           history="none").replace(  # the share of yes details stays 2 of 3: only which one says yes varies
                               "Dishwasher Safe: no", f"Dishwasher Safe: {'yes' if s else 'no'}; "
                               f"Nonstick: {'no' if s else 'yes'}")
              + f"\n{text}" for s, o, text in zip(safe, oven, frame["state_text"])]
    right = np.where(oven, 1.0, safe.astype(float))
    return frame.with_columns(pl.Series("state_text", states), pl.lit("[PredictAnswer] yes").alias("proposal_text"),
                              pl.lit("[PredictAnswer] yes").alias("action_text"), pl.Series("proposal_reward", right),
                              pl.Series("reward", right), pl.Series("success", right))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread):
    root = tmp_path_factory.mktemp("evidence")
    data = complete_folder(_frame(96, seed=3), root / "data")
    common = {"data": str(data), "model": "tiny", "tag_after": "proposal", "target": "proposal", "progress": False,
              "proposal_features": True, "hidden": False}
    return root, {"visible": run_train(TrainConfig(out=str(root / "visible"), **common)),
                  "evidence": run_train(TrainConfig(out=str(root / "evidence"), evidence_features=True,
                                                    question_vector=True, **common))}


def test_the_evidence_verifier_ranks_what_the_form_cannot_and_the_gate_agrees(trained, tmp_path):
    from prm.scoring.scorer import PrmScorer

    root, reports = trained
    assert reports["evidence"]["signals"][-len(KEYS):] == list(KEYS)
    # Every proposal is the same "yes": its form tells the two questions apart (their length), never which dish
    # washing answer is right; the record decides that.
    print(reports["visible"]["oof_auroc"], reports["evidence"]["oof_auroc"])
    assert reports["visible"]["oof_auroc"] < 0.8 < 0.95 < reports["evidence"]["oof_auroc"]
    prm = ProcessRewardModel.load(root / "evidence")
    assert prm.settings.question_vector == 384 and prm.settings.head_width == 384 + 2 * len(prm.settings.signal_keys)
    fresh = _frame(12, seed=11).with_columns(pl.col("episode_id").str.replace("synthetic", "fresh"))
    new = complete_folder(fresh, tmp_path / "new")
    run_score(ScoreConfig(data=str(new), model=str(root / "evidence"), progress=False))
    logged = pl.read_parquet(new / "part-000.parquet")
    assert auroc(logged["prm_score"], logged["proposal_reward"]) > 0.9
    scorer = PrmScorer(prm)
    online = [scorer.score(Observation(row["episode_id"], "synthetic", row["task_id"], 0, row["state_text"], 1),
                           proposal=Action(row["proposal_text"]))
              for row in logged.iter_rows(named=True)]
    np.testing.assert_allclose(online, logged["prm_score"].to_numpy(), atol=1e-5)


def test_evidence_needs_proposal_mode_and_a_frozen_value_head(tmp_path):
    frame = synthetic_frame(episodes=12, steps=1, seed=1)
    with pytest.raises(ValueError, match="--evidence-features"):
        run_train(TrainConfig(out=str(tmp_path), model="tiny", evidence_features=True, progress=False), frame=frame)
    with pytest.raises(ValueError, match="question_vector"):
        ProcessRewardModel.create("tiny", lora=True, question_vector=384)
