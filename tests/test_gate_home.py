"""One home for gates: every gate a user, the sweep or ``agile eval`` can build is defined in ``helper/gates/`` and
named in its one registry (``helper.gates.registry.GATES``); a file's name says one role.

A gate is read from the syntax tree (nothing imported): a class with a method a gate answers by (``wants``,
``should_intervene``, ``pick_scored``, ``intervene_probability``, or ``choose`` given a budget). What else holds such
a method is named below with why it is no gate to build."""

from __future__ import annotations

import ast
import typing
from collections import Counter
from pathlib import Path

import pytest

from helper.evaluation.agile_advice import AgileEvalConfig
from helper.evaluation.methods import METHODS, _checked
from helper.gates.registry import GATES

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agile", "helper", "prm", "tabular_rl", "trajectories")
HOME = "helper/gates"
ANSWERS = {"wants", "should_intervene", "pick_scored", "intervene_probability"}
NOT_BUILT_HERE = {
    ("agile/protocol.py", "Gate"): "the contract every gate keeps",
    ("agile/budget.py", "BudgetedGate"): "the base every gate extends, beside the count the episode loop keeps",
    ("agile/budget.py", "ScoredGate"): "the base of the gates that read a score",
    ("agile/executor/episode.py", "ExternalAdvice"): "the executor's mark that advice is decided outside it",
    ("helper/serve/gate_server.py", "ServedGate"): "the server's ledger in front of a gate it is given",
    ("helper/data/recorder.py", "Recorder"): "collection's random interventions in a user's own loop",
}
SAME_ROLE = {
    # tabular_rl's one-kind rooms and their tiered mirrors (tabular_rl/tiered/) do one job each, with kinds.
    "estimate.py", "evaluate.py", "exact.py", "label.py", "lagrangian.py", "simulate.py", "solution.py",
}
NAMED_APART = {
    "helps.py": "one idea on two floors: trajectories records a kind in a row; agile calls it in the loop",
}
"""File names two rooms share today, each with its roles: a new shared name fails until it is named here."""


def _product_files():
    for package in PACKAGES:
        yield from (path for path in (ROOT / package).rglob("*.py") if path.name != "__init__.py")


def _answers_like_a_gate(node: ast.ClassDef) -> bool:
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            if item.name in ANSWERS:
                return True
            if item.name == "choose" and {"budget_left", "calls_left"} & {a.arg for a in item.args.args}:
                return True
    return False


def _gate_classes() -> dict[tuple[str, str], ast.ClassDef]:
    found = {}
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if _answers_like_a_gate(node) or any(base.endswith("Gate") for base in bases):
                    found[(str(path.relative_to(ROOT)), node.name)] = node
    return found


def test_every_gate_lives_in_the_gates_wing():
    outside = sorted(key for key in _gate_classes() if not key[0].startswith(HOME + "/") and key not in NOT_BUILT_HERE)
    assert not outside, f"gates outside {HOME}/ (move them there, into GATES): {outside}"
    gone = sorted(key for key in NOT_BUILT_HERE if key not in _gate_classes())
    assert not gone, f"NOT_BUILT_HERE names what is not there: {gone}"


def test_the_registry_holds_every_gate_of_the_wing_by_its_name():
    defined = {name for (path, name) in _gate_classes() if path.startswith(HOME + "/")}
    registered = {name: GATES[name] for name in GATES}
    assert {cls.__name__ for cls in registered.values()} == defined
    for name, cls in registered.items():
        assert cls.__module__.startswith("helper.gates."), (name, cls.__module__)
        own = cls.__dict__.get("name")  # a gate that names itself carries the registry's name
        assert own is None or own == name, (name, own)
    with pytest.raises(KeyError, match="is no gate; choose from never"):
        GATES["nope"]


def test_what_the_sweep_and_agile_eval_build_is_in_the_registry():
    for name, method in METHODS.items():
        assert method.gate in GATES, f"sweep method {name}: gate {method.gate!r} is no entry of GATES"
    built_in = typing.get_args(typing.get_type_hints(AgileEvalConfig)["gate"])
    assert set(built_in) - {"none"} <= set(GATES)


def test_the_sweep_refuses_a_gate_of_another_class_than_its_method_declares():
    never, first_k = GATES["never"], GATES["first_k"]
    assert isinstance(_checked(lambda c: first_k(c), "first_k", "first_k")(2), first_k)
    with pytest.raises(TypeError, match="method 'first_k' declares gate 'first_k' \\(FirstKGate\\) but built a NeverGate"):
        _checked(lambda c: never(c), "first_k", "first_k")(2)


def test_one_name_per_file_role():
    counts = Counter(path.name for path in _product_files())
    shared = {name for name, n in counts.items() if n > 1}
    for name in shared & SAME_ROLE:
        folders = sorted(str(p.parent.relative_to(ROOT)) for p in _product_files() if p.name == name)
        assert all(folder.startswith("tabular_rl") for folder in folders), (name, folders)
    unnamed = sorted(shared - SAME_ROLE - set(NAMED_APART))
    assert not unnamed, f"file names shared by rooms of different roles: {unnamed}; name each room by its role"
    assert not [p for p in _product_files() if p.name in ("gate.py", "gates.py")], "a gate's file names its gate"
