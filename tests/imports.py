"""The absolute imports a Python file makes, read from its syntax tree (nothing is imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def imported_modules(path: Path) -> Iterator[str]:
    """Every module named by an ``import`` or an absolute ``from ... import`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
