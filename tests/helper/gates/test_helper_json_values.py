"""helper.json's values are range-checked on load: a tampered threshold (NaN, "nan", 1.5), a negative
budget, a horizon of 0, ... refuse to load or serve, in one line naming the field."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from helper.commands.cli import main
from helper.gates.features import FeatureClassifier, frame_features
from helper.gates.helper_gate import HelperGate

NAMES = ["step", "progress", "budget_left", "budget_per_step"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A small features helper (no PRM: it decides on its fallback classifier)."""
    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"step": np.arange(200) % 4, "horizon": [4] * 200, "budget_left": rng.integers(0, 3, 200)})
    model = FeatureClassifier("logreg", NAMES).fit(frame_features(frame, NAMES), (rng.random(200) < 0.4).astype(int))
    out = tmp_path_factory.mktemp("helper")
    HelperGate("features", model, model, solved_budget=2, trained_on={"horizon": 4, "budget": 2}).save(out)
    return out


def tampered(folder, tmp_path, text: str):
    """A copy of the helper folder whose helper.json is ``text``."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "helper.json").write_text(text)
    return copy


def edited(folder, tmp_path, **changes):
    config = json.loads((folder / "helper.json").read_text())
    for key, value in changes.items():
        if "." in key:
            head, tail = key.split(".")
            config[head] = config[head] | {tail: value}
        else:
            config[key] = value
    return tampered(folder, tmp_path, json.dumps(config))


@pytest.mark.parametrize("changes, named", [
    ({"threshold": float("nan")}, "threshold=nan"),        # written by json as NaN, read back as a float NaN
    ({"threshold": "nan"}, "threshold='nan'"),             # text that float() would read as NaN
    ({"threshold": 1.5}, "threshold=1.5"),
    ({"threshold": -0.1}, "threshold=-0.1"),
    ({"threshold": True}, "threshold=True"),
    ({"solved_budget": -1}, "solved_budget=-1"),
    ({"solved_budget": "2"}, "solved_budget='2'"),
    ({"horizon": 0}, "horizon=0"),
    ({"trained_on.budget": -2}, "trained_on.budget=-2"),
    ({"trained_on.horizon": 0}, "trained_on.horizon=0"),
    ({"decide_after": "never"}, "decide_after='never'"),
])
def test_a_bad_value_refuses_to_load_and_to_serve(folder, tmp_path, capsys, changes, named):
    bad = edited(folder, tmp_path, **changes)
    with pytest.raises(ValueError, match=f"helper.json: {named}") as error:
        HelperGate.load(bad)
    assert "\n" not in str(error.value)
    assert main(["serve-gate", "--helper", str(bad)]) == 2  # refused before a port is bound
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("helpgate serve-gate: error: ") and named in lines[0]


def test_a_literal_nan_in_the_file_is_refused(folder, tmp_path):
    text = (folder / "helper.json").read_text()
    bad = tampered(folder, tmp_path, text.replace('"threshold": 0.5', '"threshold": NaN'))
    with pytest.raises(ValueError, match="threshold=nan must be a finite number in"):
        HelperGate.load(bad)
    with pytest.raises(ValueError, match="threshold=nan"):
        HelperGate("features", HelperGate.load(folder).classifier, threshold=float("nan"))
    assert HelperGate.load(folder).threshold == 0.5  # the untouched folder loads
