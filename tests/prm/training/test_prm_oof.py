"""Out-of-fold scores: a PRM that memorises its training episodes must not hand its in-sample
scores to the solver. ``prm score`` writes each training episode's score from the fold head that
did not see it, and ``helpgate solve`` bins exactly those."""

import json

import numpy as np
import polars as pl
import pytest

from helper.solve import solve_command
from prm.data.episodes import OOF_FILE, episodes_of
from prm.data.folds import assign_folds, task_group, task_type
from prm.data.labels import add_labels
from prm.verifiers.load import load_prm
from prm.scoring.score import ScoreConfig, run_score
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from tabular_rl.discretize import Discretizer
from helper_data import complete_folder


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    pass


# The outcome ignores the text (p_good=0.5) and every state has its own random filler words: all a
# head can learn is which episode is which. 24 episodes x 2 steps = 48 rows against 64 hidden
# dimensions with no L2 penalty: the in-sample fit is perfect, the out-of-fold one is chance.
FRAME = synthetic_frame(episodes=24, steps=2, words_per_state=12, p_good=0.5, seed=7)
# Every third episode's first step was an intervention (the solver needs both actions).
_HELPED = (pl.col("episode_id").str.slice(-5).cast(pl.Int64) % 3 == 0)
FRAME = FRAME.with_columns(
    (_HELPED & (pl.col("step") == 0)).alias("intervened"),
    pl.when(_HELPED & (pl.col("step") == 0)).then(pl.lit("human")).otherwise(pl.lit("base")).alias("actor"),
    pl.when(_HELPED & (pl.col("step") == 1)).then(0).otherwise(1).cast(pl.Int64).alias("budget_left"),
)


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    root = tmp_path_factory.mktemp("oof")
    data = complete_folder(FRAME, root / "data")
    # No calibration: the raw head's memorisation is the point here (a map fitted on the poor
    # out-of-fold scores would rightly pull the in-fold scores to the base rate).
    report = run_train(TrainConfig(data=str(data), out=str(root / "prm"), model="tiny", target="hard", l2=0.0,
                                   head_steps=300, progress=False, calibration="none"))
    run_score(ScoreConfig(data=str(data), model=str(root / "prm"), progress=False))
    return root, report


def test_out_of_fold_scores_differ_from_in_fold(overfit):
    root, report = overfit
    assert report["in_fold_auroc"] > 0.95  # it memorised the training episodes
    assert report["oof_auroc"] < report["in_fold_auroc"] - 0.25  # and that does not carry over
    assert report["oof_auroc"] == pytest.approx(report["validation"]["auroc"])
    oof = pl.read_parquet(root / "prm" / OOF_FILE).sort(["episode_id", "step"])
    assert oof.height == FRAME.height
    _ids, episodes = episodes_of(FRAME)
    in_fold = np.concatenate(load_prm(root / "prm").score_episodes(episodes))
    # Memorised: the saved (all-data) head puts training rows near their own outcome.
    outcome = FRAME.sort(["episode_id", "step"])["success"].to_numpy()
    assert np.abs(in_fold - outcome).mean() < 0.1
    assert np.abs(oof["prm_score"].to_numpy() - in_fold).mean() > 0.2


def test_score_and_solve_read_the_out_of_fold_scores(overfit, tmp_path):
    root, _ = overfit
    scored = pl.read_parquet(root / "data" / "part-000.parquet").sort(["episode_id", "step"])
    oof = pl.read_parquet(root / "prm" / OOF_FILE).sort(["episode_id", "step"])
    np.testing.assert_array_equal(scored["prm_score"].to_numpy(), oof["prm_score"].to_numpy())
    out = tmp_path / "solve"
    solve_command.run(solve_command.SolveConfig(data=str(root / "data"), budgets=[1], bins=4, out=str(out)))
    edges = Discretizer.load(out / "discretizer.json").edges_
    np.testing.assert_array_equal(edges, Discretizer(4).fit(oof["prm_score"].to_numpy()).edges_)
    labels = pl.read_parquet(out / "labels.parquet").sort(["episode_id", "step"])
    np.testing.assert_array_equal(labels["prm_score"].to_numpy(), oof["prm_score"].to_numpy())


def test_folds_keep_groups_and_shared_prefixes_together():
    # Episodes 0 and 1 share their first state (a prefix): soft labels average over both.
    frame = synthetic_frame(episodes=30, steps=3, seed=3)
    first = frame.filter((pl.col("episode_id") == "synthetic-3-00000") & (pl.col("step") == 0))
    frame = frame.with_columns(
        pl.when((pl.col("episode_id") == "synthetic-3-00001") & (pl.col("step") == 0))
        .then(pl.lit(first["state_text"][0])).otherwise(pl.col("state_text")).alias("state_text"),
        pl.when((pl.col("episode_id") == "synthetic-3-00001") & (pl.col("step") == 0))
        .then(pl.lit(first["action_text"][0])).otherwise(pl.col("action_text")).alias("action_text"),
    )
    labelled = add_labels(frame)
    # With 7 task groups, 5 folds are made of whole groups (and the prefix link joins groups 0 and 1).
    folds = assign_folds(labelled, 5, seed=0)
    assert folds.k == 5 and folds.how.startswith("task group")
    task = dict(labelled.group_by("episode_id").agg(pl.col("task_id").first()).iter_rows())
    by_group: dict[str, set[int]] = {}
    for episode, fold in folds.fold.items():
        by_group.setdefault(task_group(task[episode]), set()).add(fold)
    assert all(len(f) == 1 for f in by_group.values())
    assert folds.fold["synthetic-3-00000"] == folds.fold["synthetic-3-00001"]
    # With more folds than groups, folds are by episode, the prefix-sharing pair still together.
    many = assign_folds(labelled, 10, seed=0)
    assert many.k == 10 and many.how.startswith("episodes")
    assert many.fold["synthetic-3-00000"] == many.fold["synthetic-3-00001"]
    rows = np.bincount(list(many.fold.values()), minlength=10)
    assert rows.max() - rows.min() <= 2  # 29 components of 1-2 episodes dealt evenly


def test_task_ids_name_their_group_and_kind():
    assert task_group("blades/fact_qa_12") == "blades"
    assert task_type("blades/fact_qa_12") == "fact_qa"
    assert task_type("search_qa_0") == "search_qa"
    assert task_type("q3-r5-o10-s7-dense") is None
    assert task_group("q3-r5-o10-s7-dense") == "q3-r5-o10-s7-dense"


def test_per_type_oof_auroc_from_task_ids(tmp_path):
    frame = synthetic_frame(episodes=40, steps=(2, 3), seed=5)
    kinds = ["fact_qa", "search_qa"]
    frame = frame.with_columns(
        (pl.col("task_id") + "/" + pl.Series([kinds[s % 2] for s in frame["step"]]) + "_" + pl.col("step").cast(pl.String))
        .alias("task_id")
    )
    report = run_train(TrainConfig(data="synthetic", out=str(tmp_path), model="tiny", l2=0.01, progress=False),
                       frame=frame)
    assert set(report["oof_auroc_per_type"]) == set(kinds)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["oof_auroc_per_type"] == pytest.approx(report["oof_auroc_per_type"])
    assert report["oof_auroc"] > 0.8  # the cue word carries over to held-out folds
    # Rows and positives per kind, counted from the same judged rows.
    counts = report["oof_rows_per_type"]
    assert sum(c["rows"] for c in counts.values()) == report["validation"]["rows"]
    for kind, c in counts.items():
        assert 0 <= c["positives"] <= c["rows"]
