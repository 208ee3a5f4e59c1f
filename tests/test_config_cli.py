"""Config dataclasses become command-line options with their docstrings as help."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from helper.cli import main
from helper.config_cli import field_docs, parse_config


@dataclass
class DemoConfig:
    out: str = "runs/x"
    """Where results go."""
    budget: list[int] = field(default_factory=lambda: [1, 2])
    """Budgets to solve for."""
    method: Literal["exact", "lp"] = "exact"
    """Solver."""
    quick: bool = False
    """Small sizes."""
    rate: float | None = None
    """Optional rate."""


def test_docs_read_from_source():
    assert field_docs(DemoConfig) == {
        "out": "Where results go.", "budget": "Budgets to solve for.", "method": "Solver.",
        "quick": "Small sizes.", "rate": "Optional rate.",
    }


def test_parse_types_and_defaults():
    cfg = parse_config(DemoConfig, ["--budget", "0", "3", "--method", "lp", "--quick", "--rate", "0.5"])
    assert cfg == DemoConfig(out="runs/x", budget=[0, 3], method="lp", quick=True, rate=0.5)
    assert parse_config(DemoConfig, []) == DemoConfig()


def test_bad_choice_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_config(DemoConfig, ["--method", "magic"])
    assert "invalid choice: 'magic'" in capsys.readouterr().err


def test_helpgate_without_command_prints_help(capsys):
    assert main([]) == 2
    assert "pipeline" in capsys.readouterr().out


@dataclass
class PercentConfig:
    share: float = 0.5
    """Share of rows, in % of the data."""


def test_percent_in_docstring_does_not_break_help(capsys):
    with pytest.raises(SystemExit):
        parse_config(PercentConfig, ["--help"])
    assert "in % of the data" in capsys.readouterr().out
