"""The house rules: arrows point down, and no module imports itself through others.

Packages: tabular_rl and the trajectories floor import nothing of ours but themselves, agile
imports only the floor, prm only agile and the floor, helper all of them. Inside agile, helper and
prm, the rooms and wings stand on floors too (``AGILE_FLOORS``, ``HELPER_FLOORS``, ``PRM_FLOORS``): a
wing imports only parts below it. Every import counts, also one made inside a function."""

from pathlib import Path

import pytest
from imports import cycles, import_graph, imported_modules

ROOT = Path(__file__).resolve().parent.parent
OURS = {"agile", "helper", "prm", "tabular_rl", "trajectories"}
ALLOWED = {"tabular_rl": {"tabular_rl"}, "trajectories": {"trajectories"}, "agile": {"agile", "trajectories"},
           "prm": {"prm", "agile", "trajectories"}, "helper": OURS}
HELPER_FLOORS = {"option_ranges": -1, "experiment_options": -1, "config_cli": 0, "provenance": 0, "stored_config": 0, "gates": 1, "data": 1, "solve": 2,
                 "serve": 2, "evaluation": 3, "commands": 4}
"""helper's rooms and wings by floor: a module may import a part of helper on a lower floor only
(``helper/__init__.py``, the public face, imports lazily and stands above all)."""
PRM_FLOORS = {"inputs": 0, "data": 1, "verifiers": 1, "training": 2, "scoring": 3}
"""prm's wings by floor, the same rule (``prm/__init__.py``, the public face, stands above all)."""
AGILE_FLOORS = {"protocol": 0, "functions": 0, "seeding": 0, "models": 0, "budget": 1, "helps": 1, "envs": 1,
                "tiered_budget": 2, "gates": 2, "agents": 2, "rollout": 3, "executor": 4, "train": 5}
"""agile's core rooms and wings by floor: the contracts, the function tokens, seeds and model loading at
the ground; the counts (one kind, then priced kinds on it) below the episode loop that keeps them; the agents below the executor that runs them (an agent speaks the executor's function tokens
through ``agile.functions``, never through the executor), the training of the executor's policy on top."""
FLOORS = {"agile": AGILE_FLOORS, "helper": HELPER_FLOORS, "prm": PRM_FLOORS}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down(package):
    for path in (ROOT / package).rglob("*.py"):
        for name in imported_modules(path):
            top = name.split(".")[0]
            assert top not in OURS or top in ALLOWED[package], f"{path.relative_to(ROOT)} imports {name}"


def _part(package: str, module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == package and len(parts) > 1 else None


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_wings_point_down(package):
    floors = FLOORS[package]
    graph = import_graph(ROOT, tuple(sorted(OURS)))
    unplaced = sorted({part for module in graph if (part := _part(package, module)) and part not in floors})
    assert not unplaced, f"{package} parts with no floor in {package.upper()}_FLOORS: {unplaced}"
    for module, targets in graph.items():
        part = _part(package, module)
        for target in targets:
            other = _part(package, target)
            if part and other and other != part:
                assert floors[other] < floors[part], f"{module} imports {target}: an arrow up or across"


def test_no_import_cycle():
    found = cycles(import_graph(ROOT, tuple(sorted(OURS))))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(cycle) for cycle in found)


def test_the_graph_reads_relative_imports(tmp_path):
    # tabular_rl imports its rooms relatively: a circle of them (discretize -> aligned -> transitions -> discretize,
    # one of them inside a function) went unseen while only absolute imports were read.
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import a\n")
    (package / "a.py").write_text("from .b import name\n")
    (package / "b.py").write_text("def f():\n    from .sub import c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from ..a import name\nfrom .. import b\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg"] == {"pkg.a"} and graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.a", "pkg.b"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_prm_light_wings_import_without_torch_and_the_public_names_resolve():
    import subprocess
    import sys

    probe = ("import sys; import prm.data.folds; assert 'torch' not in sys.modules, 'torch loaded'; "
             "import prm; from prm import ProcessRewardModel, ScoreConfig, TrainConfig, run_score, run_train; "
             "assert sorted(prm.__all__) == sorted(['ProcessRewardModel', 'ScoreConfig', 'TrainConfig', "
             "'run_score', 'run_train']); print(ProcessRewardModel.__module__)")
    done = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "prm.verifiers.model"
