"""The house rules of the product's rooms.

Every folder of rooms has a complete map: its ``__init__.py`` docstring names each module as ``name.py`` and
each sub-package as ``name/``, and names no room the folder does not hold (a room moved or deleted leaves no
stale entry). And no function spans more than ``LONGEST`` lines: a longer one is split into named steps."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agile", "helper", "prm", "tabular_rl", "trajectories")
FOLDERS = sorted(init.parent for package in PACKAGES for init in (ROOT / package).rglob("__init__.py"))


def _map(folder: Path) -> str:
    return ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""


def rooms(folder: Path) -> list[str]:
    """``name.py`` for each module of ``folder``, ``name/`` for each wing."""
    found = [p.name for p in folder.glob("*.py") if p.name != "__init__.py"]
    return found + [f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").is_file()]


def unmapped(folder: Path) -> list[str]:
    """The rooms of ``folder`` its map does not name."""
    doc = _map(folder)
    return sorted(room for room in rooms(folder) if f"``{room}``" not in doc)


def stale(folder: Path) -> list[str]:
    """What the map names as a room (``name.py``, ``name/``) that ``folder`` does not hold."""
    return sorted(set(re.findall(r"``(\w+\.py|\w+/)``", _map(folder))) - set(rooms(folder)))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: str(f.relative_to(ROOT)))
def test_every_room_is_on_its_folders_map(folder):
    missing = unmapped(folder)
    assert not missing, f"{folder.relative_to(ROOT)}/__init__.py: its docstring map does not name {missing}"
    gone = stale(folder)
    assert not gone, f"{folder.relative_to(ROOT)}/__init__.py: its docstring map names {gone}, which it does not hold"


def test_a_room_left_off_the_map_is_found(tmp_path):
    (tmp_path / "wing").mkdir()
    (tmp_path / "wing" / "__init__.py").write_text('"""- ``wing/``: ...\n- ``a.py``: one room."""\n')
    (tmp_path / "__init__.py").write_text('"""- ``a.py``: mapped.\n- ``wing/``: a wing."""\n')
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "wing" / "a.py").write_text("")
    assert unmapped(tmp_path) == ["b.py"]
    (tmp_path / "wing" / "c.py").write_text("")
    assert unmapped(tmp_path / "wing") == ["c.py"]
    # A bare word is not a map entry: "b" said in passing does not name b.py.
    (tmp_path / "__init__.py").write_text('"""- ``a.py``: mapped, unlike b.\n- ``wing/``: a wing."""\n')
    assert unmapped(tmp_path) == ["b.py"] and stale(tmp_path) == []
    # A room moved away leaves its entry behind: named, not held.
    (tmp_path / "a.py").unlink()
    assert stale(tmp_path) == ["a.py"]


LONGEST = 120
"""Lines a function of the product may span, from its ``def`` to its last line (docstring and nested functions
included, decorators not)."""


def long_functions(root: Path, limit: int = LONGEST) -> list[str]:
    """``path:line name (n lines)`` for each function (method, nested function) under ``root`` longer than
    ``limit`` lines; paths relative to ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_of_the_product_is_longer_than_the_limit():
    found = [f"{package}/{entry}" for package in PACKAGES for entry in long_functions(ROOT / package)]
    assert not found, f"functions over {LONGEST} lines (split each into named steps): {found}"


def test_a_long_function_is_found(tmp_path):
    (tmp_path / "wing").mkdir()
    (tmp_path / "a.py").write_text("def fits():\n" + "    x = 1\n" * (LONGEST - 1)
                                   + "\n\n@staticmethod\ndef over():\n" + "    x = 1\n" * LONGEST)
    (tmp_path / "wing" / "b.py").write_text("class C:\n    async def method(self):\n" + "        y = 2\n" * LONGEST)
    assert long_functions(tmp_path) == [f"a.py:{LONGEST + 4} over ({LONGEST + 1} lines)",
                                        f"wing/b.py:2 method ({LONGEST + 1} lines)"]
