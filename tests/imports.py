"""Imports for the tests: the absolute imports a Python file makes, read from its syntax tree
(nothing is imported), and a benchmark script loaded as a module (``benchmarks/`` is no package)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType


def imported_modules(path: Path) -> Iterator[str]:
    """Every module named by an ``import`` or an absolute ``from ... import`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` loaded as a module, to test its functions."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
