"""Configs stored in run folders and read back: the one place that knows their older spellings.

A command's config is stored flat, with the keys its command line spells (``pipeline.json``, the
sweep's ``summary.json``, a collection's ``manifest.json``): ``flat(config)`` writes the nested
``EnvSpec`` as fields beside the command's own, and ``config_of(cls, values)`` nests them again. A
folder written before the nesting reads the same, and so do keyword arguments spelled as on the
command line (``config_of(SweepConfig, env="textworld", episodes=8)``).

Keys renamed since older folders were written are mapped here and only here (``renamed``, the
table ``RENAMED``): the largest budget ``max_budget = M`` became the list ``budgets`` (the pipeline
and online RL: 1..M, the sweep: 0..M, what each played), ``helper.json``'s ``max_budget`` became
``solved_budget``, ``agile eval``'s share ``gate_budget`` became the integer ``budget`` per
episode (share × questions per group, rounded), and ``distill``'s ``budget`` (which solved table gives
the labels, stored in ``helper.json``'s ``distill_config``) became ``solved_budget``: ``budget`` is an
episode's cap in every config, ``solved_budget`` which solved table. (The executor's ``advice_budget``,
-1 for no limit, became ``budget``, None for no limit; no run folder stores it.) A stored config holding
an old key and its new one with other values is refused in one line naming both. A key that no field
reads any more is left out, as before.

An old flag on the command line is refused in one line that names its new spelling
(``renamed_flag``, called by ``helpgate`` before parsing): ``RENAMED_FLAGS`` in every command,
``RENAMED_FLAGS_OF`` in one command's config only (``--budget`` is an episode's cap elsewhere).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any


def _budgets_from(first: int) -> Callable[[Any, dict], list[int] | None]:
    """``max_budget = M`` as the list ``first..M`` (None stays None: the default range)."""
    return lambda top, values: None if top is None else list(range(first, int(top) + 1))


def _share_of_questions(share, values: dict) -> int:
    return max(int(round(float(share) * int(values.get("questions_per_group", 50)))), 0)


def _same(value, values):
    return value


RENAMED: dict[str, dict[str, tuple[str, Callable[[Any, dict], Any]]]] = {
    # stored by (config class, or file) -> old key -> (new key, old value and the stored config -> new value)
    "PipelineConfig": {"max_budget": ("budgets", _budgets_from(1))},
    "SweepConfig": {"max_budget": ("budgets", _budgets_from(0))},
    "OnlineRLConfig": {"max_budget": ("budgets", _budgets_from(1))},
    "helper.json": {"max_budget": ("solved_budget", lambda top, values: top)},
    "EvalConfig": {"gate_budget": ("budget", _share_of_questions), "out_dir": ("out", _same)},
    "AgileEvalConfig": {"gate_budget": ("budget", _share_of_questions), "out_dir": ("out", _same)},
    "SFTConfig": {"out_dir": ("out", _same)},
    "PPOConfig": {"out_dir": ("out", _same)},
    "DistillConfig": {"budget": ("solved_budget", lambda value, values: value)},
}
"""Old keys of stored configs, and how each maps to today's (see the module docstring)."""

ADDED: dict[str, dict[str, Any]] = {
    # The sweep's environment gained the AGILE settings when it nested EnvSpec; older sweeps ran with these.
    "SweepConfig": {"max_new_tokens": 96, "decoding": "free"},
    # The PRM's proposal features became a pipeline flag; older pipelines' PRMs did not read them.
    "PipelineConfig": {"prm_proposal_features": False, "solve_pessimism": 0.0, "binning": "quantile",
                       # The words candidate came later: an older pipeline's verifier never read them.
                       "prm_word_features": False},
}
"""Keys added to stored configs since older folders were written, with the value those folders had."""

RENAMED_FLAGS = {
    "--max-budget": "--budgets (the budgets themselves: --budgets 1 2 3 where --max-budget 3 was)",
    "--gate-budget": "--budget (advice per episode, an integer: --budget 2 of 8 questions where --gate-budget 0.25 was)",
}
"""Flags renamed with the keys above: refused in one line naming the new one."""

RENAMED_FLAGS_OF: dict[str, dict[str, str]] = {
    "SolveConfig": {"--budget": "--budgets (the budgets to solve for: --budgets 1 2 3)",
                    "--kinds": "--help-kinds (kinds of help with their prices, as collect names them)",
                    "--caps": "--help-caps (calls per episode of some kinds, as collect names them)"},
    "DistillConfig": {"--budget": "--solved-budget (which solved table gives the labels: --solved-budget 2)"},
    **{config: {"--out-dir": "--out (the folder the command writes, as every command names it)",
                "--data-root": "--data (the ProductQA root, as every command names it)"}
       for config in ("SFTConfig", "PPOConfig", "AgileEvalConfig")},
}
"""Flags renamed in one command's config (by its class name): refused there in one line naming the new one."""


def renamed(values: dict, kind: str, where: object = "a stored config") -> dict:
    """``values`` with the old keys of ``kind`` (a config class's name, or ``helper.json``) mapped to
    today's, and the keys added since filled with the value older folders had (``ADDED``); an old key
    beside its new one with another value is refused, naming both."""
    out = dict(values)
    for old, (new, convert) in RENAMED.get(kind, {}).items():
        if old not in out:
            continue
        value = convert(out.pop(old), values)
        if new in out and out[new] != value:
            raise ValueError(f"{where}: holds both {old}={values[old]!r} (an older spelling, which means {new}="
                             f"{value!r}) and {new}={out[new]!r}; delete one of the two keys.")
        out[new] = value
    return {**ADDED.get(kind, {}), **out}


def renamed_flag(argv: list[str], config: str | None = None) -> str | None:
    """The message for the first renamed flag in ``argv`` of the command whose config class is named
    ``config`` (None when there is none)."""
    flags = {**RENAMED_FLAGS, **RENAMED_FLAGS_OF.get(config or "", {})}
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in flags:
            return f"{flag} was renamed: use {flags[flag]}."
    return None


def _nested(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that hold a nested config dataclass (the ``EnvSpec``), by name."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)
            if isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name])}


def _plain(value):
    """JSON's view of a value: tuples as lists, so a stored config compares equal to a fresh one."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def same_setting(key: str, stored, now) -> bool:
    """Whether a stored setting matches one given now. A config stored before the pipeline resolved
    ``--agent-dtype auto`` does not say which dtype ran (bfloat16 on a GPU, float32 on a CPU): it matches either,
    when a run resumes (``helper.commands.resume``) and when seeds are pooled (``helpgate report``)."""
    return stored == now or (key == "agent_dtype" and "auto" in (stored, now))


def flat(config) -> dict:
    """``config`` as stored: its fields, with each nested config's fields in place of the nested one."""
    out: dict = {}
    nested = _nested(type(config))
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        inner = flat(value) if item.name in nested else {item.name: value}
        clash = set(inner) & set(out)
        if clash:  # a config that declares a field its nested spec has too: not one declaration
            raise TypeError(f"{type(config).__name__}: field(s) {sorted(clash)} declared twice (nested and own).")
        out |= inner
    return _plain(out)


def config_of(cls: type, values: dict | None = None, /, where: object = "a stored config", **fields):
    """An instance of ``cls`` from flat ``values`` and ``fields`` (a stored config, old keys renamed, or
    keyword arguments spelled as on the command line); fields they leave out keep their defaults."""
    values = renamed({**(values or {}), **fields}, cls.__name__, where)
    nested = _nested(cls)
    kwargs = {}
    for item in dataclasses.fields(cls):
        if item.name in nested:
            inner = {f.name for f in dataclasses.fields(nested[item.name])}
            given = {k: _tuples(v) for k, v in values.items() if k in inner}
            if isinstance(values.get(item.name), nested[item.name]):
                kwargs[item.name] = dataclasses.replace(values[item.name], **given)
            elif given:
                default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
                kwargs[item.name] = dataclasses.replace(default, **given)
        elif item.name in values:
            kwargs[item.name] = values[item.name]
    return cls(**kwargs)


def _tuples(value):
    """A nested spec is frozen and holds tuples where a stored config has lists."""
    return tuple(value) if isinstance(value, list) else value
