"""A helper folder is one unit: helper.json's horizon, feature names and PRM fingerprint are checked
on load, a mismatch refused in one line naming the field; older folders load with a warning."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

from helper import HelperGate
from helper.gates.identity import UntrustedPrm, prm_fingerprint
from helper_data import NAMES, classifier

@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    from prm.verifiers.model import ProcessRewardModel

    return ProcessRewardModel.create("tiny", tag_after="state", device="cpu", seed=0).save(
        tmp_path_factory.mktemp("run") / "prm")


def helper(tmp_path, prm_dir, name="helper"):
    folder = tmp_path / name
    HelperGate("features", classifier(NAMES), classifier(NAMES[1:]), solved_budget=2,
               trained_on={"env": ["productqa"], "horizon": 4, "budget": 2, "method": "exact"}).save(
        folder, prm=str(prm_dir))
    return folder


def edit(folder, **changes):
    path = folder / "helper.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_a_consistent_folder_loads_with_its_prm(tmp_path, prm_dir):
    folder = helper(tmp_path, prm_dir)
    config = json.loads((folder / "helper.json").read_text())
    assert config["horizon"] == 4 and config["feature_names"] == NAMES
    assert config["fallback_feature_names"] == NAMES[1:] and config["prm_fingerprint"] == prm_fingerprint(prm_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        gate = HelperGate.load(folder)
    assert gate.scorer is not None and gate.horizon == 4 and gate.degraded is None


def test_mixed_files_are_refused_naming_the_field(tmp_path, prm_dir):
    folder = helper(tmp_path, prm_dir)
    classifier(["prm_score", "step", "budget_left"]).save(folder / "classifier")  # another distill's
    with pytest.raises(ValueError, match=r"helper\.json: feature_names=\['prm_score', 'step', 'budget_left', "
                                         r"'f_memory_hits'\] but classifier/ reads") as error:
        HelperGate.load(folder)
    assert "\n" not in str(error.value)
    folder = helper(tmp_path, prm_dir, "fallback")
    classifier(["step"]).save(folder / "fallback")
    with pytest.raises(ValueError, match="fallback_feature_names="):
        HelperGate.load(folder)
    for bad, match in ((0, "horizon=0 must be a whole number >= 1"), ("4", "horizon='4'"), (5, "horizon=5 but trained_on")):
        folder = helper(tmp_path, prm_dir, f"horizon-{bad}")
        edit(folder, horizon=bad)
        with pytest.raises(ValueError, match=match):
            HelperGate.load(folder)


def test_another_prm_is_refused_and_an_explicit_one_is_the_callers(tmp_path, prm_dir):
    folder = helper(tmp_path, prm_dir)
    other = shutil.copytree(prm_dir, tmp_path / "other-prm")
    assert prm_fingerprint(other) == prm_fingerprint(prm_dir)  # a copy is the same PRM
    config = json.loads((other / "prm_config.json").read_text())
    (other / "prm_config.json").write_text(json.dumps(config | {"max_length": 64}))
    assert prm_fingerprint(other) != prm_fingerprint(prm_dir)
    (other / "metrics.json").write_text("{}")  # files that do not decide scores do not count
    before = prm_fingerprint(other)
    (other / "metrics.json").write_text('{"auroc": 1}')
    assert prm_fingerprint(other) == before
    edit(folder, prm=str(other), prm_absolute=str(other))
    for allow in (True, False):  # a PRM that loads but is not the helper's is never used quietly
        with pytest.raises(UntrustedPrm, match=r"prm_fingerprint=sha256:\w+… but the PRM at .*other-prm"):
            HelperGate.load(folder, allow_fallback=allow)
    assert HelperGate.load(folder, prm=False).scorer is None
    assert HelperGate.load(folder, prm=str(other)).scorer is not None  # named by the caller: not compared


def test_a_missing_prm_falls_back_or_is_refused(tmp_path, prm_dir):
    folder = helper(tmp_path, prm_dir)
    edit(folder, prm=str(tmp_path / "gone"), prm_absolute=str(tmp_path / "gone"))
    with pytest.warns(UserWarning, match="could not load the PRM"):
        gate = HelperGate.load(folder)
    assert gate.scorer is None and "gone" in gate.degraded and gate.with_budget(1).degraded == gate.degraded
    with pytest.raises(UntrustedPrm, match=r"helper\.json: could not load the PRM at .*gone"):
        HelperGate.load(folder, allow_fallback=False)


def test_an_older_folder_loads_with_one_warning(tmp_path, prm_dir):
    folder = helper(tmp_path, prm_dir)
    config = json.loads((folder / "helper.json").read_text())
    for field in ("horizon", "feature_names", "fallback_feature_names", "prm_fingerprint"):
        config.pop(field)
    (folder / "helper.json").write_text(json.dumps(config))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gate = HelperGate.load(folder)
    (message,) = [str(w.message) for w in seen]
    assert "records no horizon, feature_names, prm_fingerprint" in message
    assert gate.scorer is not None and gate.horizon == 4  # trained_on still says it



def another_distills(names):
    """A classifier on the same inputs as ``helper_data.classifier(names)``, fitted on other labels."""
    import numpy as np
    import polars as pl

    from helper.gates.features import FeatureClassifier, frame_features

    rng = np.random.default_rng(1)
    frame = pl.DataFrame({"episode_id": ["e"] * 40, "step": np.arange(40) % 4, "horizon": [4] * 40,
                          "budget_left": rng.integers(1, 3, 40), "prm_score": rng.random(40),
                          "features": ['{"memory_hits": 1.0}'] * 40})
    return FeatureClassifier("logreg", names).fit(frame_features(frame, names), rng.integers(0, 2, 40))


def test_a_classifier_of_another_distill_with_the_same_feature_names_is_refused(tmp_path, prm_dir):
    """Feature names cannot tell two distills apart when they read the same inputs: helper.json records each
    classifier file's hash (classifier_files) and a file that differs is refused naming it."""
    ours = helper(tmp_path, prm_dir, "ours")
    for name, names in (("classifier", NAMES), ("fallback", NAMES[1:])):
        mixed = shutil.copytree(ours, tmp_path / f"mixed-{name}")
        another_distills(names).save(mixed / name)  # the same inputs, other weights
        with pytest.raises(ValueError, match=rf"helper\.json: {name}/model\.skops hashes to sha256:\w+… where "
                                             r"helper\.json records sha256:\w+… \(classifier_files\)") as error:
            HelperGate.load(mixed)
        assert "\n" not in str(error.value)
    # An older folder, without the record, loads with the warning that names what it lacks.
    older = shutil.copytree(ours, tmp_path / "older")
    another_distills(NAMES).save(older / "classifier")
    config = json.loads((older / "helper.json").read_text())
    config.pop("classifier_files")
    (older / "helper.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match="records no classifier_files"):
        assert HelperGate.load(older).scorer is not None
