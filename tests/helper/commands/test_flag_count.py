"""The product's command line stays small and speaks one vocabulary (issue 62, points 1 and 3).

Flags are counted from the parsers ``helpgate`` builds (``helper.config_cli.command_flags``), not from ``--help``
text: every subcommand's together at most ``MAX_FLAGS``, each naming its default in its help, and its range where
``helper.option_ranges`` holds one. The
options of a measurement or an ablation are the experiment entry's (``benchmarks/experiment.py``): the product
refuses one in one line naming it, and the entry parses it into the same config. One meaning has one spelling:
``SYNONYMS`` lists spellings of one meaning, and at most one of each group is a flag of any command.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from helper.commands.cli import COMMANDS, main
from helper.option_ranges import RANGES
from helper.config_cli import command_flags, parse_config
from helper.experiment_options import EXPERIMENT_ENTRY, EXPERIMENT_OPTIONS, _nested, all_experiment_flags

MAX_FLAGS = 213
"""At most this many product flags over every subcommand (448 counted on --help before experiments left)."""

SYNONYMS: tuple[frozenset[str], ...] = tuple(frozenset(group) for group in (
    {"--out", "--out-dir", "--output", "--output-dir", "--outdir"},
    {"--seed", "--seeds", "--random-seed", "--rng-seed"},
    {"--device", "--devices", "--accelerator"},
    {"--decoding", "--decode", "--decoding-mode"},
    {"--model", "--model-name", "--model-path", "--model-dir"},
    {"--data", "--data-root", "--data-dir", "--dataset"},
    {"--help-kinds", "--kinds"},
    {"--help-caps", "--caps"},
    {"--episodes", "--n-episodes", "--num-episodes"},
    {"--budgets", "--max-budget"},
    {"--backend", "--helper-backend"},
    {"--resamples", "--ci-resamples", "--bootstrap"},
    {"--lr", "--learning-rate"},
    {"--dtype", "--torch-dtype"},
    {"--cpu-threads", "--threads", "--num-threads"},
    {"--advice-cost", "--cost"},
))
"""Spellings of one meaning: one of each group at most, across every command."""

RENAMED_IN_HELP = {"--help-kinds", "--help-caps", "--data"}
"""Flags whose field is named otherwise (``tyro.conf.arg(name=...)``): their range, if any, is the field's."""

ONE_DEFAULT = ("--decoding", "--device")
"""Flags of one meaning whose default is the same in every command that takes them (``--seed`` is not: each
command's draws keep apart from the others', and ``--out`` names each command's own folder)."""

SINGLE_CAP = ("--budget",)
"""One cap per episode (a single number) where ``--budgets`` is a list of them."""


def _config(path: tuple[str, ...]) -> type:
    module, config, *_ = COMMANDS[path]
    return getattr(importlib.import_module(module), config)


@pytest.fixture(scope="module")
def flags() -> dict[tuple[str, ...], dict[str, str]]:
    return {path: command_flags(_config(path)) for path in COMMANDS}


def test_the_product_has_at_most_its_flags(flags):
    counts = {" ".join(path): len(shown) for path, shown in flags.items()}
    assert sum(counts.values()) <= MAX_FLAGS, f"{sum(counts.values())} product flags > {MAX_FLAGS}: {counts}"


def test_each_flag_names_its_default_and_range(flags):
    # tyro writes "(default: ...)" for a field with a default, "(required)" for one without.
    for path, shown in flags.items():
        for flag, text in shown.items():
            assert "(default: " in text or "(required)" in text, (" ".join(path), flag)
            allowed = RANGES.get(flag[2:].replace("-", "_"))
            if allowed is not None and flag not in RENAMED_IN_HELP:
                assert f"; {allowed.text()})" in text, (" ".join(path), flag, text)


def test_one_spelling_per_meaning(flags):
    spelled = {flag for shown in flags.values() for flag in shown}
    for group in SYNONYMS:
        assert len(group & spelled) <= 1, f"one meaning, several spellings: {sorted(group & spelled)}"


def test_one_default_per_meaning(flags):
    import re

    for flag in ONE_DEFAULT:
        defaults = {" ".join(path): re.findall(r"\(default: ([^;)]*)", shown[flag])[-1]
                    for path, shown in flags.items() if flag in shown}
        assert len(defaults) >= 2 and len(set(defaults.values())) == 1, (flag, defaults)


def test_budget_is_one_cap_and_budgets_a_list():
    for path in COMMANDS:
        fields = {f.name: f for f in dataclasses.fields(_config(path))}
        for flag in (*SINGLE_CAP, "--budgets"):
            item = fields.get(flag[2:].replace("-", "_"))
            if item is None or flag not in command_flags(_config(path)):
                continue
            default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
            is_list = isinstance(default, (list, tuple)) or "list[" in str(item.type)
            assert is_list == (flag == "--budgets"), (" ".join(path), flag, item.type)


def test_every_experiment_option_is_a_field():
    # A name in the registry that no config declares would hide nothing, silently.
    declared: dict[str, set[str]] = {}

    def declare(cls: type) -> None:
        for klass in cls.__mro__:
            if dataclasses.is_dataclass(klass):
                declared.setdefault(klass.__name__, set()).update(f.name for f in dataclasses.fields(klass))
        for inner, _ in _nested(cls).values():
            declare(inner)

    for path in COMMANDS:
        declare(_config(path))
    for owner, names in EXPERIMENT_OPTIONS.items():
        assert owner in declared, owner
        assert set(names) <= declared[owner], (owner, sorted(set(names) - declared[owner]))


@pytest.mark.parametrize("argv, flag", [
    (["pipeline", "--prm-evidence-features"], "--prm-evidence-features"),
    (["pipeline", "--no-prm-proposal-features"], "--no-prm-proposal-features"),
    (["collect", "--consistency-samples=2"], "--consistency-samples"),
    (["prm", "train", "--question-vector"], "--question-vector"),
    (["agile", "ppo", "--estimator", "distinct"], "--estimator"),
    (["sweep", "--rl-use-prm"], "--rl-use-prm"),
])
def test_an_experiment_option_is_refused_in_one_line_naming_the_entry(argv, flag, capsys):
    assert main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    command = " ".join(argv[:2] if argv[0] in ("prm", "agile") else argv[:1])
    assert lines[0].startswith(f"helpgate {command}: error: {flag} is an experiment's option")
    assert f"{EXPERIMENT_ENTRY} {command}" in lines[0]


def test_the_experiment_entry_parses_the_same_config():
    from helper.commands.pipeline import PipelineConfig

    config = parse_config(PipelineConfig, ["--prm-evidence-features", "--gold-features"], experiments=True)
    assert type(config) is PipelineConfig and config.prm_evidence_features and config.spec.gold_features
    product = parse_config(PipelineConfig, ["--out", "runs/x"])
    assert type(product) is PipelineConfig and type(product.spec) is type(PipelineConfig().spec)
    assert dataclasses.replace(product, out="runs/demo") == PipelineConfig()  # the main job's values, unchanged
    assert "gold_features" in all_experiment_flags(PipelineConfig)
