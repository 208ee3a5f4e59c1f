"""The knn baseline: exact nearest-neighbour failure rates, labels by the PRM's target, out-of-fold calibration
by group, and a sweep that plays it on the simulator under its budget."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import polars as pl
import pytest
from helper_data import HORIZON, trajectories

from agile.protocol import Action, Observation
from helper.gates import knn
from helper.evaluation.sweep import SweepConfig
from helper.evaluation.sweep import run as sweep
from helper.data.environment import EnvSpec
from trajectories.shards import read_trajectories


class TableEmbedder:
    """A tiny deterministic embedder: each text's vector from a table (the gate's own path calls ``encode``)."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table
        self.calls: list[list[str]] = []

    def encode(self, texts):
        self.calls.append(list(texts))
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def _brute_force(points: np.ndarray, failed: np.ndarray, query: np.ndarray, k: int) -> float:
    """The share of the k most cosine-similar points that failed, ties to the lower index, by plain loops."""
    cosines = []
    for index, point in enumerate(points):
        cosine = float(point @ query) / (np.linalg.norm(point) * np.linalg.norm(query))
        cosines.append((-round(cosine, 12), index))
    nearest = [index for _, index in sorted(cosines)[:k]]
    return sum(failed[i] for i in nearest) / k


# Five points in the plane at known angles, the failing ones marked 1; and three queries.
TABLE = {"a": [1, 0], "b": [0.9, 0.1], "c": [0, 1], "d": [-1, 0.2], "e": [0.7, 0.7],
         "q1": [1, 0.05], "q2": [0.1, 1], "q3": [-1, -1], "p1": [0, 1], "p2": [1, 0]}
FAILED = np.array([1, 0, 1, 1, 0])


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_the_failure_rate_is_the_exact_nearest_neighbours_share(k):
    embedder = TableEmbedder(TABLE)
    points = knn.decision_vectors(embedder, list("abcde"))
    rate = knn.KnnRate(points, FAILED, k)
    raw = np.array([TABLE[t] for t in "abcde"], dtype=float)
    for query in ("q1", "q2", "q3"):
        vector = knn.decision_vectors(embedder, [query])
        shares, weighted = rate.rates(vector)
        assert shares[0] == pytest.approx(_brute_force(raw, FAILED, np.array(TABLE[query], float), k), abs=1e-12)
        # The tie-break never reorders two shares: it is under half the gap between them.
        assert 0.0 <= rate.failure_score(vector)[0] - shares[0] < 1.0 / (2 * k)
    # q1 lies between a (failed) and b (succeeded), nearer a: one neighbour is a.
    assert knn.KnnRate(points, FAILED, 1).rates(knn.decision_vectors(embedder, ["q1"]))[0][0] == 1.0


def test_the_scorer_reads_the_state_and_in_proposal_mode_the_proposal():
    embedder = TableEmbedder(TABLE)
    observation = Observation("e0", "productqa", "g/q_1", 0, "q1", HORIZON)
    # State mode: the score is 1 minus the failure score of the state's neighbours.
    rate = knn.KnnRate(knn.decision_vectors(embedder, list("abcde")), FAILED, 2)
    state = knn.KnnScorer(embedder, rate)
    assert state.score(observation) == pytest.approx(1.0 - rate.failure_score(knn.decision_vectors(embedder, ["q1"]))[0])
    # Proposal mode: a point is its state and proposal, a dot product the mean of the two cosines.
    states, proposals = ["a", "b", "c"], ["p1", "p2", "p2"]
    points = knn.decision_vectors(embedder, states, proposals)
    query = knn.decision_vectors(embedder, ["q1"], ["p1"])
    for i, (s, p) in enumerate(zip(states, proposals)):
        cos = lambda x, y: float(np.dot(x, y) / np.linalg.norm(x) / np.linalg.norm(y))
        expected = (cos(TABLE["q1"], TABLE[s]) + cos(TABLE["p1"], TABLE[p])) / 2
        assert float(points[i] @ query[0]) == pytest.approx(expected)
    # The nearest of (a, p1), (b, p2), (c, p2) to (q1, p1) is (a, p1): a failed point.
    scorer = knn.KnnScorer(embedder, knn.KnnRate(points, np.array([1, 0, 0]), 1), "proposal")
    assert scorer.score(observation, Action("p1")) == pytest.approx(1.0 - 1.0 - 1.0 / 4 * 1.0)
    assert embedder.calls[-2:] == [["q1"], ["p1"]]


def _rows(steps: list[int], success: list[float], actors: list[str]) -> pl.DataFrame:
    n = len(steps)
    episode = np.cumsum([s == 0 for s in steps]) - 1
    return pl.DataFrame({
        "episode_id": [f"e{e}" for e in episode], "step": steps, "task_id": [f"g{e}/q_{s}" for e, s in zip(episode, steps)],
        "state_text": [f"s{i}" for i in range(n)], "action_text": ["x"] * n, "actor": actors,
        "reward": [0.0] * n, "done": [False] * n, "success": success})


def test_failure_follows_the_prms_target(tmp_path):
    # Two episodes: e0 failed (3 steps), e1 succeeded (2 steps); e0's step 1 was the human's.
    rows = _rows([0, 1, 2, 0, 1], [0, 0, 0, 1, 1], ["base", "human", "base", "base", "base"])
    prm = tmp_path / "prm"
    prm.mkdir()
    (prm / "metrics.json").write_text(json.dumps({"target": "label_fatal", "config": {
        "success_threshold": 0.5, "tag_after": "state", "base_only": True}}))
    used, failed, how = knn.failure_labels(rows, knn.prm_label_settings(prm))
    # fatal: only the step a failed episode ended on failed; the human's row is no point (base rows only).
    assert used.tolist() == [True, False, True, True, True] and failed[used].tolist() == [False, True, False, False]
    assert "label_fatal" in how and "base-agent rows" in how
    (prm / "metrics.json").write_text(json.dumps({"target": "label_soft", "config": {
        "success_threshold": 0.5, "tag_after": "state", "base_only": False}}))
    used, failed, how = knn.failure_labels(rows, knn.prm_label_settings(prm))
    # An episode target: every step of the failed episode failed, every row a point.
    assert used.all() and failed.tolist() == [True, True, True, False, False] and "episode success" in how
    # Rows given out of (episode, step) order keep their order.
    shuffled = rows[[4, 2, 0, 3, 1]]
    assert knn.failure_labels(shuffled, knn.prm_label_settings(prm))[1].tolist() == [False, True, True, False, True]


def test_the_threshold_is_calibrated_out_of_fold_by_group():
    rng = np.random.default_rng(0)
    vectors = knn._unit(rng.normal(size=(40, 3)))
    failed = rng.random(40) < 0.4
    used = rng.random(40) < 0.8
    groups = np.array([f"g{i % 6}" for i in range(40)], dtype=object)
    oof, fold_of = knn.out_of_fold_scores(vectors, failed, used, groups, 5, 3)
    for group in set(groups):  # a group lies in one fold
        assert len(set(fold_of[groups == group])) == 1
    for i in range(40):  # each row scored by the points of the other folds alone, exactly
        others = np.flatnonzero(used & (fold_of != fold_of[i]))
        share = _brute_force(vectors[others], failed[others].astype(float), vectors[i], 3)
        # The failure score is the share plus a tie-break of at most 1 / (2k + 2): it pins the share on its 1/k grid.
        assert share <= 1.0 - oof[i] <= share + 1 / 8


def test_knn_plays_a_sweep_on_the_simulator_within_its_budget(tmp_path):
    data = trajectories(tmp_path / "rows", n=60)
    out = tmp_path / "sweep"
    cfg = SweepConfig(spec=EnvSpec(questions_per_episode=HORIZON), helper=str(tmp_path / "none"), out=str(out),
                      episodes=24, budgets=[0, 1, 2], methods=["knn"], train_data=str(data), ci_resamples=50,
                      decide_after="state", knn_encoder="tiny")
    summary = sweep(cfg)
    report = summary["knn"]
    rows = read_trajectories(data)
    assert report["points"] == (rows["actor"] == "base").sum() and report["calibration_folds_by"] == "task group"
    assert report["texts"] == "state" and "no PRM folder" in report["labels"] and report["encoder"] == "tiny"
    episodes = pd.read_csv(out / "episodes.csv")
    played = episodes[episodes["method"] == "knn"]
    assert sorted(set(played["budget"])) == [0, 1, 2] and len(played) == 3 * 24
    assert (played["interventions"] <= played["budget"]).all()  # never over its budget, episode by episode
    # It spends where its neighbours failed: some of the budget at C = 2, not none.
    assert played[played["budget"] == 2]["interventions"].mean() > 0
    assert "knn" in summary["methods"] and not summary["skipped"]
