"""PRM folds that fall back to episodes (fewer task groups than folds) say so: in the folds, so in the PRM's
metrics.json (``folds.by``), and under ``helpgate report``'s table."""

from __future__ import annotations

import json

from test_report import _standard

from helper.evaluation.report import ReportConfig, run
from prm.data.folds import FELL_BACK, assign_folds
from prm.data.labels import add_labels
from prm.data.synthetic import synthetic_frame


def test_folds_say_when_they_fall_back_to_episodes():
    labelled = add_labels(synthetic_frame(episodes=30, steps=3, seed=3))
    groups = labelled["task_id"].map_elements(lambda t: t.split("/")[0], return_dtype=str).n_unique()
    held_out = assign_folds(labelled, groups, seed=0)
    assert not held_out.fell_back and FELL_BACK not in held_out.how
    fallen = assign_folds(labelled, groups + 3, seed=0)
    assert fallen.fell_back and f"only {groups} independent task groups for {groups + 3} folds" in fallen.how


def test_the_report_names_runs_whose_prm_folds_fell_back(tmp_path):
    for name, by in (("a", "task group (task_id before '/')"), ("b", f"episodes; {FELL_BACK} (only 4 ...)")):
        folder = _standard(tmp_path / name, [1, 0, 1, 0], [0, 0, 1, 0], seed=1000 + len(name + by))
        (folder / "prm").mkdir()
        (folder / "prm" / "metrics.json").write_text(json.dumps({"folds": {"k": 5, "by": by}}))
    text = run(ReportConfig([f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}"], out=str(tmp_path / "r.md"), figures=False))
    note = next(line for line in text.splitlines() if line.startswith("PRM folds fell back"))
    assert str(tmp_path / "b") in note and str(tmp_path / "a") + " " not in note and "(only 4 ...)" in note
