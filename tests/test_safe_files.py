"""Loading a helper never runs code from its files: skops with an allowlist, safetensors, JSON, npz."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
import skops.io

from helper.gates.features import MODEL_FILE, FeatureClassifier, UnsafeModelFile
from tabular_rl import Discretizer
from tabular_rl.solution import Solution


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    X[::9, 0] = np.nan  # exercises the imputer's was-missing indicator
    return X, (X[:, 1] > 0.5).astype(int)


@pytest.mark.parametrize("model", ["gbm", "logreg"])
def test_skops_round_trip_predicts_identically(tmp_path, model):
    X, y = _data()
    fitted = FeatureClassifier(model, ["a", "b", "c"], max_iter=20).fit(X, y)
    fitted.save(tmp_path / "c")
    assert (tmp_path / "c" / MODEL_FILE).exists() and not list((tmp_path / "c").glob("*.pkl"))
    loaded = FeatureClassifier.load(tmp_path / "c")
    assert np.array_equal(loaded.predict_proba(X), fitted.predict_proba(X))
    assert loaded.feature_names == ["a", "b", "c"] and loaded.model == model


def test_constant_classifier_round_trips_through_json(tmp_path):
    X, _ = _data()
    FeatureClassifier("gbm", ["a", "b", "c"]).fit(X, np.ones(len(X), dtype=int)).save(tmp_path / "c")
    assert not (tmp_path / "c" / MODEL_FILE).exists()
    assert np.all(FeatureClassifier.load(tmp_path / "c").predict_proba(X) == 1.0)


class Payload:
    """What an attacker would ship: an object of a type no helper classifier has."""

    def __init__(self):
        self.command = "echo owned"


def test_unexpected_type_is_refused_naming_the_file(tmp_path):
    X, y = _data()
    FeatureClassifier("logreg", ["a", "b", "c"]).fit(X, y).save(tmp_path / "c")
    skops.io.dump({"estimator": Payload()}, tmp_path / "c" / MODEL_FILE)  # tampered
    with pytest.raises(UnsafeModelFile, match=rf"{MODEL_FILE}: holds types .*Payload.*refusing") as error:
        FeatureClassifier.load(tmp_path / "c")
    assert "\n" not in str(error.value)
    (tmp_path / "c" / MODEL_FILE).write_bytes(b"not a zip file")  # corrupt
    with pytest.raises(UnsafeModelFile, match=rf"{MODEL_FILE}: not a readable skops file"):
        FeatureClassifier.load(tmp_path / "c")


def test_old_pickle_folder_is_refused_without_unpickling(tmp_path):
    X, y = _data()
    FeatureClassifier("logreg", ["a", "b", "c"]).fit(X, y).save(tmp_path / "c")
    (tmp_path / "c" / MODEL_FILE).unlink()
    marker = tmp_path / "ran"

    class Boom:  # unpickling this would create the marker file
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "c" / "model.pkl").write_bytes(pickle.dumps({"estimator": Boom()}))
    with pytest.raises(UnsafeModelFile, match="model.pkl: pickled classifiers are no longer loaded.*helpgate distill"):
        FeatureClassifier.load(tmp_path / "c")
    assert not marker.exists()


def test_policy_table_and_discretizer_are_plain_files(tmp_path):
    disc = Discretizer(4).fit(np.linspace(0, 1, 50), np.arange(50) % 3)
    disc.save(tmp_path / "discretizer.json")
    json.loads((tmp_path / "discretizer.json").read_text())  # JSON, nothing else
    policy = np.random.default_rng(0).random((3, 5, 3))
    solution = Solution("exact", 2, policy, policy * 2, True, 1.0, 0.5, 1.2, disc)
    solution.save(tmp_path / "policy.npz")
    loaded = Solution.load(tmp_path / "policy.npz", Discretizer.load(tmp_path / "discretizer.json"))
    assert np.array_equal(loaded.policy, policy) and loaded.budget == 2
    # An npz whose arrays need pickle (object dtype) is refused, not unpickled.
    np.savez(tmp_path / "bad.npz", summary=np.array(json.dumps(solution.summary())),
             policy=np.array([Payload()], dtype=object), values=policy)
    with pytest.raises(ValueError, match="allow_pickle"):
        Solution.load(tmp_path / "bad.npz")


def test_text_classifier_loads_safetensors_only(tmp_path):
    from helper.gates.text_classifier import TextClassifier

    classifier = TextClassifier("tiny", max_length=32, epochs=1, batch_size=4).fit(["a b", "c d", "e", "f"],
                                                                                     [0, 1, 0, 1])
    classifier.save(tmp_path / "t")
    assert list((tmp_path / "t" / "model").glob("*.safetensors"))
    texts = ["a b", "zzz"]
    assert np.allclose(TextClassifier.load(tmp_path / "t").predict_proba(texts), classifier.predict_proba(texts))
    for weights in (tmp_path / "t" / "model").glob("*.safetensors"):
        weights.unlink()
    shutil.copy(tmp_path / "t" / "classifier.json", tmp_path / "t" / "model" / "pytorch_model.bin")
    with pytest.raises(ValueError, match="no \\*.safetensors weights"):
        TextClassifier.load(tmp_path / "t")


def test_no_package_loads_a_pickle():
    """No module imports pickle/joblib/dill, and every np.load says allow_pickle=False."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package in ("agile", "helper", "prm", "tabular_rl", "trajectories"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text()
            assert not re.search(r"^\s*(import|from)\s+(pickle|cPickle|joblib|dill|cloudpickle)\b", text, re.MULTILINE), path
            assert "torch.load(" not in text, path
            for call in re.findall(r"np\.load\([^)]*\)", text):
                assert "allow_pickle=False" in call, f"{path}: {call}"
