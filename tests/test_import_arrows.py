"""The house rule: arrows point down. tabular_rl and the trajectories floor import nothing of ours
but themselves, agile imports only the floor, prm only agile and the floor."""

from pathlib import Path

import pytest
from imports import imported_modules

ROOT = Path(__file__).resolve().parent.parent
OURS = {"agile", "helper", "prm", "tabular_rl", "trajectories"}
ALLOWED = {"tabular_rl": {"tabular_rl"}, "trajectories": {"trajectories"}, "agile": {"agile", "trajectories"},
           "prm": {"prm", "agile", "trajectories"}, "helper": OURS}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down(package):
    for path in (ROOT / package).rglob("*.py"):
        for name in imported_modules(path):
            top = name.split(".")[0]
            assert top not in OURS or top in ALLOWED[package], f"{path.relative_to(ROOT)} imports {name}"
