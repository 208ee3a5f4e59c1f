"""The house rule: arrows point down. tabular_rl and agile import nothing of ours but themselves,
prm imports only agile (so the shard module it shares with helper lives in agile)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"agile", "helper", "prm", "tabular_rl"}
ALLOWED = {"tabular_rl": {"tabular_rl"}, "agile": {"agile"}, "prm": {"prm", "agile"},
           "helper": OURS}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down(package):
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in OURS or top in ALLOWED[package], f"{path.relative_to(ROOT)} imports {name}"
