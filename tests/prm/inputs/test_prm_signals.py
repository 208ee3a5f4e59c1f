"""The PRM with the agent's signals beside the hidden state, and its out-of-fold calibration."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from agile.protocol import Action, Observation
from prm.verifiers.calibration import Calibrator, cross_fitted, fit_calibrator
from prm.data.episodes import OOF_FILE
from prm.verifiers.load import load_prm
from prm.training.quality import auroc, ece
from prm.scoring.score import ScoreConfig, run_score
from prm.inputs.signals import SIGNALS_COLUMN, signal_keys, signal_matrix, signal_vector
from prm.data.synthetic import synthetic_frame
from prm.training.train import TrainConfig, run_train
from trajectories.number_maps import number_maps
from trajectories.shards import mark_complete
from helper_data import complete_folder


def test_signal_matrix_has_a_fixed_order_and_flags_missing_values():
    frame = pl.DataFrame({SIGNALS_COLUMN: ['{"margin": 2.0, "answer_logprob": -0.5}', "{}",
                                           '{"margin": NaN, "entropy": 0.25}', '{"answer_logprob": -1}']})
    assert signal_keys(frame) == ["answer_logprob", "entropy", "margin"]
    keys = ["margin", "answer_logprob", "entropy", "unseen"]
    matrix = signal_matrix(frame, keys)
    assert matrix.dtype == np.float32 and matrix.shape == (4, 8)
    # values in key order, then one missing flag per key (NaN counts as missing)
    np.testing.assert_array_equal(matrix, [[2.0, -0.5, 0, 0, 0, 0, 1, 1],
                                           [0, 0, 0, 0, 1, 1, 1, 1],
                                           [0, 0, 0.25, 0, 1, 1, 0, 1],
                                           [0, -1, 0, 0, 1, 0, 1, 1]])
    np.testing.assert_array_equal(signal_vector({"entropy": 0.25, "margin": float("nan")}, keys), matrix[2])
    assert signal_matrix(pl.DataFrame({"x": [1, 2]}), keys).tolist() == [[0] * 4 + [1] * 4] * 2  # no column
    with pytest.raises(ValueError, match="proposal_signals.*JSON object"):
        signal_matrix(pl.DataFrame({SIGNALS_COLUMN: ["[1, 2]"]}), keys)


def _miscalibrated(n=2000, seed=0):
    """True probabilities p, outcomes drawn from them, and an overconfident score p ** 3."""
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    return p ** 3, (rng.random(n) < p).astype(float)


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_calibration_reduces_the_error_is_monotone_and_round_trips(method, tmp_path):
    scores, outcomes = _miscalibrated()
    calibrator = fit_calibrator(scores, outcomes, method)
    assert calibrator.method == method
    held_scores, held_outcomes = _miscalibrated(seed=1)
    assert ece(held_scores, held_outcomes) > 0.15
    assert ece(calibrator(held_scores), held_outcomes) < 0.05
    grid = np.linspace(0, 1, 1001)
    mapped = calibrator(grid)
    assert (np.diff(mapped) >= -1e-12).all() and mapped.min() >= 0 and mapped.max() <= 1
    calibrator.save(tmp_path)
    loaded = Calibrator.load(tmp_path)
    np.testing.assert_array_equal(loaded(grid), mapped)
    assert json.loads((tmp_path / "calibration.json").read_text())["method"] == method  # plain JSON, no pickle


def test_isotonic_equals_scikit_learn_and_cross_fitting_holds_rows_out():
    from sklearn.isotonic import IsotonicRegression

    scores, outcomes = _miscalibrated(300, seed=3)
    ours = fit_calibrator(scores, outcomes, "isotonic")
    reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(scores, outcomes)
    probe = np.concatenate([np.linspace(-0.1, 1.1, 97), scores])
    np.testing.assert_allclose(ours(probe), reference.predict(probe), atol=1e-12)
    groups = np.arange(300) % 3
    honest = cross_fitted(scores, outcomes, groups, "isotonic")
    for g in range(3):
        held = groups == g
        alone = fit_calibrator(scores[~held], outcomes[~held], "isotonic")(scores[held])
        np.testing.assert_array_equal(honest[held], alone)
    assert fit_calibrator(scores, np.ones(300)).method == "none"  # one class: nothing to fit


def _signal_frame(episodes: int, seed: int) -> pl.DataFrame:
    """One-step episodes whose outcome is set by the agent's margin alone (the text says nothing)."""
    frame = synthetic_frame(episodes=episodes, steps=1, p_good=0.5, seed=seed)
    rng = np.random.default_rng(seed + 100)
    margin = rng.normal(size=frame.height)
    won = (margin > 0).astype(float)
    # An uninformative second signal, absent on every fourth row.
    cells = [json.dumps({"margin": float(m)} | ({"entropy": float(rng.random())} if i % 4 else {}))
             for i, m in enumerate(margin)]
    # Logged in proposal mode: the signals describe the proposal the tag follows.
    return frame.with_columns(pl.Series("success", won), pl.Series("reward", won), pl.Series(SIGNALS_COLUMN, cells),
                              pl.col("action_text").alias("proposal_text"), pl.Series("proposal_reward", won))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread):
    root = tmp_path_factory.mktemp("signals")
    frame = _signal_frame(96, seed=4)
    data = complete_folder(frame, root / "data")
    common = {"data": str(data), "model": "tiny", "target": "hard", "tag_after": "proposal", "progress": False,
              "feature_cache": str(root / "features.npz")}
    reports = {
        "hidden": run_train(TrainConfig(out=str(root / "hidden"), signals=False, **common)),
        "signals": run_train(TrainConfig(out=str(root / "signals"), **common)),  # on by default: the data has them
    }
    return root, frame, reports


def test_signals_rank_what_the_hidden_state_cannot(trained):
    _root, _frame, reports = trained
    assert reports["hidden"]["signals"] is None and reports["signals"]["signals"] == ["entropy", "margin"]
    assert 0.3 < reports["hidden"]["oof_auroc"] < 0.7
    assert reports["signals"]["oof_auroc"] > 0.9
    # 96 out-of-fold rows, Platt by default; the honest (cross-fitted) error is reported both ways.
    calibration = reports["signals"]["calibration"]
    assert calibration["method"] == "platt" and calibration["fitted_on"] == 96
    for metric in ("oof_brier", "oof_ece"):
        assert set(reports["signals"][metric]) == {"before", "after"}
        assert all(np.isfinite(v) for v in reports["signals"][metric].values())


def test_prm_score_and_the_gate_give_the_same_calibrated_scores(trained, tmp_path):
    from prm.scoring.scorer import PrmScorer

    root, frame, _ = trained
    folder = root / "signals"
    prm = load_prm(folder)
    assert prm.settings.signal_keys == ["entropy", "margin"] and prm.calibrator.method == "platt"
    # Training episodes: their calibrated out-of-fold scores.
    run_score(ScoreConfig(data=str(root / "data"), model=str(folder), out=str(tmp_path / "train"), progress=False))
    scored = pl.read_parquet(tmp_path / "train" / "part-000.parquet").sort("episode_id")
    oof = pl.read_parquet(folder / OOF_FILE).sort("episode_id")
    np.testing.assert_array_equal(scored["prm_score"].to_numpy(), oof["prm_score"].to_numpy())
    np.testing.assert_allclose(oof["prm_score"].to_numpy(), prm.calibrator(oof["prm_score_raw"].to_numpy()))
    # New episodes: the saved head, then the calibrator; the gate's scorer reads the proposal's signals.
    fresh = _signal_frame(12, seed=9).with_columns(pl.col("episode_id").str.replace("synthetic", "fresh"))
    (tmp_path / "new").mkdir()
    fresh.write_parquet(tmp_path / "new" / "part-000.parquet")
    mark_complete(tmp_path / "new")
    run_score(ScoreConfig(data=str(tmp_path / "new"), model=str(folder), progress=False))
    logged = pl.read_parquet(tmp_path / "new" / "part-000.parquet")
    assert auroc(logged["prm_score"], logged["success"]) > 0.9
    for incremental in (True, False):
        scorer = PrmScorer(prm, incremental=incremental)
        online = []
        for row, signals in zip(logged.iter_rows(named=True), number_maps(logged[SIGNALS_COLUMN])):
            observation = Observation(row["episode_id"], "synthetic", row["task_id"], 0, row["state_text"], 1, {})
            proposal = Action(row["action_text"], signals=signals)
            online.append(scorer.score(observation, proposal=proposal))
        np.testing.assert_allclose(online, logged["prm_score"].to_numpy(), atol=1e-5)
    # A proposal given as bare text has no signals: they count as missing, another score, not an error.
    scorer = PrmScorer(prm)
    row = logged.row(0, named=True)
    alone = scorer.score(Observation(row["episode_id"] + "x", "synthetic", "t", 0, row["state_text"], 1, {}),
                         proposal=row["action_text"])
    assert np.isfinite(alone)


def test_signals_are_refused_where_no_head_can_read_them(tmp_path):
    frame = synthetic_frame(episodes=12, steps=1, seed=1)
    with pytest.raises(ValueError, match="no agent signals"):
        run_train(TrainConfig(out=str(tmp_path), model="tiny", signals=True, progress=False), frame=frame)
    with pytest.raises(ValueError, match="value head on a frozen (causal )?backbone"):
        run_train(TrainConfig(out=str(tmp_path), model="tiny", signals=True, head="tag", progress=False),
                  frame=_signal_frame(12, seed=1))
    with pytest.raises(ValueError, match="tag-after state"):  # the gate would not have them yet
        run_train(TrainConfig(out=str(tmp_path), model="tiny", signals=True, tag_after="state", progress=False),
                  frame=_signal_frame(12, seed=1))
    with pytest.raises(ValueError, match="calibration='sigmoid'"):
        run_train(TrainConfig(out=str(tmp_path), model="tiny", calibration="sigmoid", progress=False), frame=frame)
