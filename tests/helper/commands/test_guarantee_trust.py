"""A guarantee holds only for the gate it measured: ``calibrate`` refuses to certify a helper whose PRM is missing
unless --allow-fallback, and then records it; such a guarantee never shows on the PRM-scored helper once its PRM is
back (nor a PRM-scored one on a gate without its PRM); a guarantee.json cut short or without ``member`` is one
warning naming the file, and the helper loads and serves without it."""

from __future__ import annotations

import json
import warnings

import numpy as np
import polars as pl
import pytest
from one_line_errors import one_error_line

from helper import HelperGate
from helper.commands.cli import main
from helper.gates.certify import GUARANTEE_FILE

NAMES = ["--env", "examples.arith_chain:make_episodes", "--agent", "examples.arith_chain:make_agent"]


def classifier(names):
    from helper.gates.features import FeatureClassifier, frame_features

    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"step": np.arange(60) % 4, "horizon": [5] * 60, "budget_left": rng.integers(1, 3, 60),
                          "prm_score": rng.random(60), "features": ['{"multiply": 1.0}'] * 60})
    return FeatureClassifier("logreg", names).fit(frame_features(frame, names), rng.integers(0, 2, 60))


@pytest.fixture()
def helper_dir(tmp_path):
    """A helper that reads a PRM score, whose recorded PRM (``prm/`` beside it) is not there: it decides on its
    fallback classifier."""
    names = ["prm_score", "step", "budget_left", "f_multiply"]
    folder = tmp_path / "helper"
    HelperGate("features", classifier(names), classifier(names[1:]), solved_budget=2,
               trained_on={"env": ["arith_chain"], "horizon": 5, "budget": 2, "method": "exact"}).save(
        folder, prm=str(tmp_path / "prm"))
    return folder


def calibrate(helper_dir, *extra) -> int:
    return main(["calibrate", "--helper", str(helper_dir), *NAMES, "--episodes", "30", "--eps", "0.95", "--delta",
                 "0.5", *extra])


def test_calibrate_refuses_the_fallback_unless_allowed_and_then_records_it(helper_dir, capsys):
    assert calibrate(helper_dir) == 2
    line = one_error_line(capsys)
    assert "could not load the PRM at" in line and "calibrate would certify the helper's fallback classifier" in line
    assert "--allow-fallback" in line and not (helper_dir / GUARANTEE_FILE).exists()

    assert calibrate(helper_dir, "--allow-fallback") == 0
    record = json.loads((helper_dir / GUARANTEE_FILE).read_text())
    assert "could not load the PRM at" in record["fallback"]
    # The gate that decides as it was certified shows it; the PRM-scored helper, once its PRM is back, does not.
    assert HelperGate.load(helper_dir, prm=False).guarantee == record
    with pytest.warns(UserWarning, match="could not load the PRM"):
        assert HelperGate.load(helper_dir).guarantee == record  # still missing: the same fallback gate
    from prm.verifiers.model import ProcessRewardModel

    ProcessRewardModel.create("tiny", tag_after="state", device="cpu", seed=0).save(helper_dir.parent / "prm")
    with pytest.warns(UserWarning, match=r"certified on the fallback classifier .*does not cover this gate"):
        gate = HelperGate.load(helper_dir)
    assert gate.scorer is not None and gate.guarantee is None


def test_a_guarantee_with_its_prm_is_not_shown_on_a_gate_without_it(helper_dir):
    record = {"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "target": 0.9, "n": 40,
              "member": {"budget": 2, "success": 0.95, "interventions": 1.2}, "data_fingerprint": "sha256:x"}
    from helper.gates.certify import helper_fingerprint

    (helper_dir / GUARANTEE_FILE).write_text(json.dumps(record | {"helper_fingerprint":
                                                                  helper_fingerprint(helper_dir)}))
    with pytest.warns(UserWarning, match="certified with its PRM, and this gate decides on its fallback"):
        assert HelperGate.load(helper_dir, prm=False).guarantee is None


@pytest.mark.parametrize("text, named", [
    ('{"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "target": 0.9, "n": 40, "data_fing', "not valid JSON"),
    ('{"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "target": 0.9, "n": 40}', "no valid member"),
])
def test_an_unreadable_guarantee_is_one_warning_and_the_helper_still_loads_and_serves(helper_dir, text, named):
    from fastapi.testclient import TestClient

    from helper.serve.gate_server import ServedGate, create_app

    (helper_dir / GUARANTEE_FILE).write_text(text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gate = HelperGate.load(helper_dir, prm=False)
    (message,) = [str(w.message) for w in seen]
    assert str(helper_dir / GUARANTEE_FILE) in message and named in message and "without a guarantee" in message
    assert "\n" not in message and gate.guarantee is None
    health = TestClient(create_app(ServedGate(gate), horizon=5)).get("/health").json()
    assert health["status"] == "ok" and health["guarantee"] is None
