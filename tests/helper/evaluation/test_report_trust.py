"""``helpgate report`` trusts only what it was given: one run given twice (``R R``, ``R R/sweep``, a copy of R) is
refused rather than pooled as two seeds; the guarantee it shows is that of the run folder it was given (not of the
run a copy came from), never one calibrated before a re-distill, and a guarantee.json it cannot read is named in
one warning line, never a traceback."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from one_line_errors import one_error_line
from test_report import _row, _standard

from helper import HelperGate
from helper.commands.cli import main
from helper.gates.certify import GUARANTEE_FILE, helper_fingerprint


def test_one_run_given_twice_is_refused_naming_both_paths(tmp_path, capsys):
    run = _standard(tmp_path / "runs" / "r0", [1, 1, 1, 1], [0, 1, 0, 1])
    copy = shutil.copytree(run, tmp_path / "copy-of-r0")
    for second in (run, copy):
        assert main(["report", str(run), str(second), "--out", str(tmp_path / "r.md"), "--no-figures"]) == 2
        line = one_error_line(capsys)
        assert f"runs {run} and {second} are one run" in line and "give each run once" in line
    # A pipeline folder and its own sweep/ are one run too.
    pipeline = tmp_path / "pipeline"
    _standard(pipeline / "sweep", [1, 1, 1, 1], [0, 1, 0, 1])
    assert main(["report", str(pipeline), str(pipeline / "sweep"), "--out", str(tmp_path / "r.md")]) == 2
    assert "the same sweep folder" in one_error_line(capsys)


def pipeline_run(root: Path, target: float = 0.9) -> Path:
    """A pipeline layout R/sweep + R/helper, its sweep recording the helper's absolute path, and a guarantee."""
    from helper_data import NAMES, classifier

    run = root / "run"
    HelperGate("features", classifier(NAMES), classifier(NAMES[1:]), solved_budget=2,
               trained_on={"horizon": 4}).save(run / "helper")
    sweep = _standard(run / "sweep", [1, 1, 1, 1], [0, 1, 0, 1], out=str((run / "sweep").resolve()))
    summary = json.loads((sweep / "summary.json").read_text())
    summary["config"]["helper"] = str((run / "helper").resolve())  # as a pipeline's sweep records it
    (sweep / "summary.json").write_text(json.dumps(summary))
    write_guarantee(run / "helper", target)
    return run


def write_guarantee(helper: Path, target: float, **changes) -> None:
    record = {"kind": "helpgate.guarantee", "eps": round(1 - target, 6), "delta": 0.1, "target": target, "n": 40,
              "member": {"budget": 1, "success": 0.95, "interventions": 0.8}, "data_fingerprint": "sha256:x",
              "helper_fingerprint": helper_fingerprint(helper), "fallback": None} | changes
    (helper / GUARANTEE_FILE).write_text(json.dumps(record))


def certified(tmp_path: Path, run: Path) -> str:
    out = tmp_path / "report.md"
    assert main(["report", f"toy={run}", "--out", str(out), "--no-figures", "--resamples", "50"]) == 0
    return _row(out.read_text(), "random")["certified"]


def test_the_guarantee_shown_is_the_given_runs_and_current(tmp_path):
    run = pipeline_run(tmp_path / "original", target=0.9)
    assert certified(tmp_path, run) == "0.90 at 90%, n 40: C=1, 0.80/ep"
    # A copied run reads its own helper folder, not the original's through the absolute path its sweep recorded.
    copy = Path(shutil.copytree(run, tmp_path / "copied" / "run"))
    write_guarantee(copy / "helper", 0.7)
    assert certified(tmp_path, copy) == "0.70 at 90%, n 40: C=1, 0.80/ep"
    # Re-distilled after its calibration: the guarantee measured other files and is not shown.
    from helper_data import NAMES, classifier

    HelperGate("features", classifier(NAMES), classifier(NAMES[1:]), solved_budget=2, threshold=0.4,
               trained_on={"horizon": 4}).save(copy / "helper")
    with pytest.warns(UserWarning, match="calibrated on other helper files"):
        assert certified(tmp_path, copy) == "stale (helper re-distilled since)"
    # Certified on the fallback classifier: said so.
    write_guarantee(run / "helper", 0.9, fallback="could not load the PRM at prm")
    assert certified(tmp_path, run) == "0.90 at 90%, n 40: C=1, 0.80/ep, on the fallback (no PRM)"


@pytest.mark.parametrize("text, named", [
    ('{"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "target": 0.9, "n": 40}', "no valid member"),
    ('{"kind": "helpgate.guarantee", "eps": 0.1, "delta": 0.1, "tar', "not valid JSON"),
])
def test_an_unreadable_guarantee_is_one_warning_naming_the_file(tmp_path, text, named):
    run = pipeline_run(tmp_path)
    (run / "helper" / GUARANTEE_FILE).write_text(text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert certified(tmp_path, run) == f"unreadable {GUARANTEE_FILE}"
    (message,) = [str(w.message) for w in seen if GUARANTEE_FILE in str(w.message)]
    assert str(run / "helper" / GUARANTEE_FILE) in message and named in message and "\n" not in message
