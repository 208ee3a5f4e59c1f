"""The house rule: arrows point down. tabular_rl and agile import nothing of ours but themselves,
prm imports only agile (so the shard module it shares with helper lives in agile)."""

from pathlib import Path

import pytest
from imports import imported_modules

ROOT = Path(__file__).resolve().parent.parent
OURS = {"agile", "helper", "prm", "tabular_rl"}
ALLOWED = {"tabular_rl": {"tabular_rl"}, "agile": {"agile"}, "prm": {"prm", "agile"},
           "helper": OURS}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down(package):
    for path in (ROOT / package).rglob("*.py"):
        for name in imported_modules(path):
            top = name.split(".")[0]
            assert top not in OURS or top in ALLOWED[package], f"{path.relative_to(ROOT)} imports {name}"
