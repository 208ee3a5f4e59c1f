"""Config dataclasses become command-line options (through tyro) with their docstrings as help;
user errors end in one line and exit code 2, not a traceback."""

import dataclasses
import importlib
import typing
from dataclasses import dataclass, field
from typing import Literal

import pytest
import tyro

from helper.commands.cli import COMMANDS, main
from helper.config_cli import command_flags, one_line, parse_config, run_reporting_errors
from helper.experiment_options import experiment_fields


@dataclass
class DemoConfig:
    """A demo command."""

    out: str = "runs/x"
    """Where results go."""
    budgets: list[int] = field(default_factory=lambda: [1, 2])
    """Budgets to solve for."""
    method: Literal["exact", "lp"] = "exact"
    """Solver."""
    quick: bool = False
    """Small sizes."""
    rate: float | None = None
    """Optional rate."""
    share: float = 0.5
    """Share of rows, in % of the data."""


def test_parse_types_and_defaults():
    cfg = parse_config(DemoConfig, ["--budgets", "0", "3", "--method", "lp", "--quick", "--rate", "0.5"])
    assert cfg == DemoConfig(out="runs/x", budgets=[0, 3], method="lp", quick=True, rate=0.5)
    assert parse_config(DemoConfig, []) == DemoConfig()
    assert parse_config(DemoConfig, ["--quick", "--no-quick", "--rate", "None"]) == DemoConfig()


@pytest.mark.parametrize("argv, named", [
    (["--method", "magic"], "magic"),
    (["--rate", "tru"], "tru"),          # no silent False/None for a typo
    (["--budgets", "1.5"], "1.5"),
    (["--quick", "tru"], "tru"),
    (["--nonsense", "1"], "--nonsense"),
])
def test_bad_values_are_refused_naming_the_value(argv, named, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_config(DemoConfig, argv, prog="demo")
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


def test_help_shows_docstrings(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_config(DemoConfig, ["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    for words in ("Where results go.", "Budgets to solve for.", "in % of the data", "--no-quick"):
        assert words in text


def _flag(hint, name: str) -> str:
    """The flag of a field: its own name, or the one ``tyro.conf.arg(name=...)`` gives it."""
    renamed = [meta.name for meta in getattr(hint, "__metadata__", ()) if getattr(meta, "name", None)]
    return "--" + (renamed[0] if renamed else name).replace("_", "-")


def _help(argv: list[str], capsys, experiments: bool = False) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv, experiments=experiments)
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("path", list(COMMANDS))
def test_every_command_help_lists_every_field(path, capsys):
    """The product's --help lists every field but the experiment options, which the experiment entry lists."""
    module, config_name, run_name, _ = COMMANDS[path]
    config_cls = getattr(importlib.import_module(module), config_name)
    assert callable(getattr(importlib.import_module(module), run_name))
    product, every = _help([*path, "--help"], capsys), _help([*path, "--help"], capsys, experiments=True)
    shown, all_flags = command_flags(config_cls), command_flags(config_cls, experiments=True)
    assert all(flag in product for flag in shown) and all(flag in every for flag in all_flags)
    hints = typing.get_type_hints(config_cls, include_extras=True)
    for item in dataclasses.fields(config_cls):
        if tyro.conf.Positional in getattr(hints[item.name], "__metadata__", ()):
            assert "positional arguments" in product, item.name  # given without a flag (helpgate report RUN...)
            continue
        nested = typing.get_type_hints(config_cls)[item.name]
        is_nested = dataclasses.is_dataclass(nested)
        owner, names = (nested, dataclasses.fields(nested)) if is_nested else (config_cls, [item])
        assert "--" + item.name + "." not in product  # the EnvSpec: its fields are flags of their own (--env)
        inner_hints = typing.get_type_hints(owner, include_extras=True)
        for inner in names:
            flag = _flag(inner_hints[inner.name], inner.name)
            assert flag in all_flags, (item.name, inner.name)
            assert (flag in shown) != (inner.name in experiment_fields(owner)), (item.name, inner.name)
    # Defaults are the dataclass's own (a command with a required field has none to compare).
    required = [f.name for f in dataclasses.fields(config_cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if not required:
        assert parse_config(config_cls, []) == config_cls()
        assert type(parse_config(config_cls, [])) is config_cls  # not the view the product's parser read
        assert parse_config(config_cls, [], experiments=True) == config_cls()


def test_helpgate_without_command_prints_help(capsys):
    assert main([]) == 2
    assert "pipeline" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert main(["prm"]) == 2  # a group alone: the list of commands
    assert "prm score" in capsys.readouterr().out


def test_unknown_command_is_one_line(capsys):
    assert main(["sovle", "--budget", "1"]) == 2
    err = capsys.readouterr().err
    assert "helpgate: error: unknown command 'sovle'" in err and "Traceback" not in err


def test_user_error_is_one_line_and_debug_shows_the_traceback(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["solve", "--data", str(missing), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("helpgate solve: error: ") and str(missing) in err
    assert len(err.splitlines()) == 1
    with pytest.raises((FileNotFoundError, ValueError)):
        main(["--debug", "solve", "--data", str(missing), "--out", str(tmp_path / "o")])


def test_any_other_exception_is_one_line_naming_type_and_place(capsys):
    def plugin_code(config):
        raise ZeroDivisionError("a bug in the user's own code")

    assert run_reporting_errors("demo", plugin_code, None) == (2, None)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["demo: error: ZeroDivisionError raised at tests/helper/test_config_cli.py:"
                   f"{plugin_code.__code__.co_firstlineno + 1} in plugin_code (plug-in code): a bug in the user's "
                   "own code (--debug shows the traceback)"]

    def project_bug(config):  # raised inside this project's code: an internal error, exit 1
        from tabular_rl.discretize import Discretizer

        Discretizer().transform([0.5])

    assert run_reporting_errors("demo", project_bug, None) == (1, None)
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("demo: internal error: RuntimeError at tabular_rl/discretize.py:")
    assert "in transform: Discretizer is not fitted" in line and "this is a bug" in line
    with pytest.raises(RuntimeError, match="not fitted"):
        run_reporting_errors("demo", project_bug, None, debug=True)
    assert run_reporting_errors("demo", lambda c: c * 2, 21) == (0, 42)


def test_one_line_names_the_path():
    error = FileNotFoundError(2, "No such file or directory", "/data/x.parquet")
    assert one_line(error) == "No such file or directory: /data/x.parquet"
    assert one_line(ValueError("bad\n   value")) == "bad value"


def _field_docstrings(cls) -> set[str]:
    """Fields declared in ``cls``'s own body with a string literal right under them (what tyro shows)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {node.target.id for node, after in zip(body, body[1:])
            if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}


def _configs() -> dict[str, type]:
    """Every config dataclass: each command's (helpgate's table and ``agile.train.command``'s), the
    dataclasses they inherit from or nest, every dataclass named ``*Config`` or ``*Spec`` in our four
    packages, and the settings a PRM folder stores (``prm_config.json``)."""
    import inspect
    import pkgutil
    import typing

    from agile.train.command import COMMANDS as AGILE_COMMANDS
    from prm.verifiers.model import PRMSettings

    found, todo = {}, [getattr(importlib.import_module(m), c) for m, c, *_ in COMMANDS.values()]
    todo += [*AGILE_COMMANDS.values(), PRMSettings]
    for package in ("agile", "helper", "prm", "tabular_rl"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            for name, obj in vars(importlib.import_module(info.name)).items():
                if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and name.endswith(("Config", "Spec")):
                    todo.append(obj)
    while todo:
        cls = todo.pop()
        key = f"{cls.__module__}.{cls.__qualname__}"
        if key in found:
            continue
        found[key] = cls
        todo += [base for base in cls.__mro__[1:] if dataclasses.is_dataclass(base)]
        for hint in typing.get_type_hints(cls).values():
            todo += [t for t in (hint, *typing.get_args(hint)) if isinstance(t, type) and dataclasses.is_dataclass(t)]
    return found


def test_every_field_of_every_config_has_a_docstring():
    """tyro turns the docstring under a field into its --help line: a field without one is an
    option nobody can read about."""
    configs = _configs()
    # The discovery itself: every command's config, their bases (EnvSpec's family), the executor's.
    assert {"helper.commands.pipeline.PipelineConfig", "helper.data.collect.CollectConfig",
            "helper.data.environment.EnvConfig", "helper.data.environment.EnvSpec", "agile.executor.executor.ExecutorConfig",
            "agile.train.ppo.PPOConfig", "prm.verifiers.model.PRMSettings",
            "prm.data.export.ExportConfig"} <= set(configs)
    assert len(configs) >= 21
    undocumented = {}
    for key, cls in configs.items():
        for f in dataclasses.fields(cls):
            declared_in = next(c for c in cls.__mro__ if f.name in c.__dict__.get("__annotations__", {}))
            if f.name not in _field_docstrings(declared_in):
                undocumented.setdefault(key, []).append(f.name)
    assert not undocumented, f"fields with no docstring under them: {undocumented}"


def test_the_docstring_check_sees_a_missing_one():
    @dataclass
    class Half:
        documented: int = 1
        """Has one."""
        bare: int = 2

    assert _field_docstrings(Half) == {"documented"}
