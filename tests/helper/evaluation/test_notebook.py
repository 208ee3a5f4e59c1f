"""notebooks/budget_sweep.ipynb runs top to bottom on a small sweep folder made here."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
from nbclient import NotebookClient

from helper.evaluation.metrics import summarize
from trajectories.files import write_json_atomic

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "budget_sweep.ipynb"


def _sweep_dir(folder: Path) -> Path:
    rows = [("never", 0, 0.5, 0.0), ("always", 6, 0.9, 6.0)]
    for method, successes, used in (("helper", [0.5, 0.6, 0.7], [0, 1, 2]), ("oracle", [0.5, 0.65, 0.78], [0, 1, 2]),
                                    ("random", [0.5, 0.55, 0.6], [0, 1, 2])):
        rows += [(method, c, s, u) for c, (s, u) in enumerate(zip(successes, used))]
    frame = pd.DataFrame(rows, columns=["method", "budget", "success", "interventions"])
    frame["episodes"], frame["ci_low"], frame["ci_high"] = 20, frame["success"] - 0.05, frame["success"] + 0.05
    frame.to_csv(folder / "sweep.csv", index=False)
    write_json_atomic(summarize(frame, {"helper": {"strong": 0, "human": 50}}), folder / "summary.json")
    return folder


def test_notebook_runs_on_a_sweep_folder(tmp_path, monkeypatch):
    folder = _sweep_dir(tmp_path)
    monkeypatch.setenv("HELPGATE_SWEEP_DIR", str(folder))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parents[1])}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "APGR" in html and "oracle" in html
    text = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    # helper / oracle at C=1: 0.6/0.65, at C=2: 0.7/0.78 -> worst 0.897
    assert "0.897" in text and str(folder) in text
