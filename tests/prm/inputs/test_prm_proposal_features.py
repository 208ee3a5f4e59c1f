"""The PRM reading the proposal's visible form beside the hidden state (``prm train --proposal-features``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from agile.protocol import Action, Observation
from prm.verifiers.model import ProcessRewardModel
from prm.training.quality import auroc
from prm.scoring.score import ScoreConfig, run_score
from prm.inputs.signals import signal_matrix
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from prm.inputs.visible import KEYS, proposal_features
from helper_data import complete_folder

STATE = ("You answer customers' questions about t. Reply with one line:\nTable `t` (2 products). Columns:\n"
         "[GetQuestion] {question}\n"
         "Product B000000001: a thing (2 in 1) (price: 3.5; Water Resistance: yes; Detachable Strap: no)\n"
         "[RetrieveMemory]\nKnowledge: none\nHistory: Q: Is it red? A: Yes. | Q: Does it fold? A: yes\n")
FAILED = ("[SearchProduct] SELECT product_id FROM `t` WHERE x = 1;\n[SearchResult] SQL error: no such column: x\n"
          "[PredictAnswer] none")
FOUND = ("[SearchProduct] SELECT product_id FROM `t` WHERE price < 9;\n[SearchResult] B000000001, B000000002, "
         "B000000003, B000000004, B000000005\n[PredictAnswer] B000000001")


def test_proposal_features_read_the_form_the_search_and_the_details():
    failed = proposal_features(STATE.format(question="Find me the cheapest one."), FAILED)
    assert (failed["searched"], failed["sql_error"], failed["answer_none"], failed["yesno"]) == (1, 1, 1, 0)
    assert failed["form_mismatch"] == 0 and failed["question_yesno"] == 0
    assert proposal_features(STATE.format(question="Find me the cheapest one."), "[PredictAnswer] no")["form_mismatch"] == 1
    found = proposal_features(STATE.format(question="Find me the cheapest one."), FOUND)
    assert found["answer_ids"] == 1 and found["search_rows"] == pytest.approx(np.log1p(5)) and not found["sql_error"]
    said_no = proposal_features(STATE.format(question="Is it water resistant? I swim a lot."), "[PredictAnswer] no")
    assert (said_no["yesno"], said_no["yes"], said_no["detail_agrees"], said_no["question_first_person"]) == (1, 0, -1, 1)
    assert said_no["details_yes_share"] == 0.5 and said_no["form_mismatch"] == 0
    # The retrieved history is a person's answers (advice): two, both yes.
    assert (said_no["memory_human_answers"], said_no["memory_human_yes_share"]) == (2, 1.0)
    # A search is the executor's answer: not "unanswered".
    searched = proposal_features(STATE.format(question="Find it."), "[SearchProduct] SELECT product_id FROM `t`;")
    assert (searched["searched"], searched["unanswered"], searched["sql_error"]) == (1, 0, 0)
    free = proposal_features(STATE.format(question="What does it cost?"), "[PredictAnswer] 3.5")
    assert (free["free"], free["answer_in_details"], free["form_mismatch"]) == (1, 1, 0)
    assert proposal_features("", "")["unanswered"] == 1  # no text at all: nothing breaks
    frame = pl.DataFrame({"state_text": [STATE.format(question="Find it.")], "proposal_text": [FAILED]})
    row = signal_matrix(frame, ["view:sql_error", "view:yesno"])
    np.testing.assert_array_equal(row, [[1, 0, 0, 0]])


def _proposal_frame(episodes: int, seed: int) -> pl.DataFrame:
    """One-step proposal-mode episodes in 7 groups: a failed search is always wrong, a yes/no answer right
    with a group's own rate in its text (what must not carry over), a search that found rows right most often."""
    frame = synthetic_frame(episodes=episodes, steps=1, p_good=0.5, seed=seed)
    rng = np.random.default_rng(seed + 7)
    form = rng.integers(0, 3, size=frame.height)
    proposals = [FAILED if f == 0 else ("[PredictAnswer] no" if f == 1 else FOUND) for f in form]
    right = np.where(form == 0, 0.0, np.where(form == 1, rng.random(frame.height) < 0.4,
                                                rng.random(frame.height) < 0.9)).astype(float)
    states = [STATE.format(question="Is it water resistant?" if f == 1 else "Find me one.") + f"\n{s}"
              for f, s in zip(form, frame["state_text"])]
    return frame.with_columns(pl.Series("state_text", states), pl.Series("proposal_text", proposals),
                              pl.Series("action_text", proposals), pl.Series("proposal_reward", right),
                              pl.Series("reward", right), pl.Series("success", right))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread):
    root = tmp_path_factory.mktemp("visible")
    data = complete_folder(_proposal_frame(120, seed=3), root / "data")
    common = {"data": str(data), "model": "tiny", "tag_after": "proposal", "target": "proposal", "progress": False,
              "feature_cache": str(root / "features.npz")}
    return root, {"hidden": run_train(TrainConfig(out=str(root / "hidden"), **common)),
                  "visible": run_train(TrainConfig(out=str(root / "visible"), proposal_features=True, **common))}


def test_proposal_features_train_score_and_the_gate_agrees(trained, tmp_path):
    from prm.scoring.scorer import PrmScorer

    root, reports = trained
    assert reports["visible"]["signals"] == list(KEYS)
    assert reports["visible"]["oof_auroc"] > 0.8 and reports["hidden"]["signals"] is None
    fresh = _proposal_frame(16, seed=11).with_columns(pl.col("episode_id").str.replace("synthetic", "fresh"))
    new = complete_folder(fresh, tmp_path / "new")
    run_score(ScoreConfig(data=str(new), model=str(root / "visible"), progress=False))
    logged = pl.read_parquet(new / "part-000.parquet")
    assert auroc(logged["prm_score"], logged["proposal_reward"]) > 0.8
    scorer = PrmScorer(ProcessRewardModel.load(root / "visible"))
    online = [scorer.score(Observation(row["episode_id"], "synthetic", row["task_id"], 0, row["state_text"], 1),
                           proposal=Action(row["proposal_text"]))
              for row in logged.iter_rows(named=True)]
    np.testing.assert_allclose(online, logged["prm_score"].to_numpy(), atol=1e-5)


def test_proposal_features_need_proposal_mode(tmp_path):
    frame = synthetic_frame(episodes=12, steps=1, seed=1)
    with pytest.raises(ValueError, match="--proposal-features"):
        run_train(TrainConfig(out=str(tmp_path), model="tiny", proposal_features=True, progress=False), frame=frame)


def test_the_cli_refuses_proposal_features_in_one_line(tmp_path):
    data = complete_folder(synthetic_frame(episodes=12, steps=1, seed=1), tmp_path / "data")
    # --proposal-features is an experiment's option: the experiment entry parses it, and the data refuse it.
    entry = str(Path(__file__).resolve().parents[3] / "benchmarks" / "experiment.py")
    done = subprocess.run([sys.executable, entry, "prm", "train", "--data", str(data), "--model", "tiny",
                           "--proposal-features", "--out", str(tmp_path / "prm")], capture_output=True, text=True)
    assert "experiment's option" not in done.stderr
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "--proposal-features" in lines[0] and "Traceback" not in done.stderr
