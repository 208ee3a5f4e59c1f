"""Imports for the tests: the absolute imports a Python file makes, read from its syntax tree
(nothing is imported), and a benchmark script loaded as a module (``benchmarks/`` and its wings are no packages)."""

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
    """``benchmarks/<wing>/<name>.py`` loaded as a module, to test its functions."""
    import importlib.util

    (path,) = (Path(__file__).resolve().parents[1] / "benchmarks").glob(f"*/{name}.py")
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _absolute(module: str, path: Path, level: int, name: str | None) -> str:
    """The absolute name an import of ``module`` (the file ``path``) means: ``from ..x import y`` read from there."""
    if level == 0:
        return name or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (any import: top level or inside a function, absolute or
    relative).

    ``from pkg import name`` points at ``pkg.name`` where that is a module, else at ``pkg``."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
                base = _absolute(name, path, node.level, node.module)
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets |= {child} if child in modules else {base} & modules.keys()
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
