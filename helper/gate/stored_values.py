"""The values of a ``helper.json``, range-checked before anything of the folder is loaded.

A helper folder is read back by ``HelperGate.load`` and served by ``serve-gate``; a value edited by
hand (or written by a broken tool) would otherwise decide silently: a ``threshold`` of NaN (JSON's
``NaN``, or the text ``"nan"``, which ``float()`` accepts) compares False with every probability, so
the gate never intervenes and still answers "ok". Each field is checked for its type (a number is
a JSON number, never text or a boolean) and its range; the first bad one is refused in one line
naming the file, the field and its value (``check``).
"""

from __future__ import annotations

import math
from pathlib import Path

BACKENDS = ("features", "text", "table")
DECIDE_AFTER = ("state", "proposal")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


RULES: dict[str, tuple[str, callable]] = {
    # field -> (what it must be, test); None passes where the field is optional (an older folder)
    "threshold": ("a finite number in [0, 1]", lambda v: _number(v) and math.isfinite(v) and 0 <= v <= 1),
    "solved_budget": ("a whole number >= 0", lambda v: _whole(v) and v >= 0),
    "horizon": ("a whole number >= 1", lambda v: _whole(v) and v >= 1),
    "backend": (f"one of {', '.join(BACKENDS)}", lambda v: v in BACKENDS),
    "decide_after": (f"one of {', '.join(DECIDE_AFTER)}", lambda v: v in DECIDE_AFTER),
    "feature_names": ("a list of names", lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v)),
    "fallback_feature_names": ("a list of names", lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v)),
    "trained_on.horizon": ("a whole number >= 1", lambda v: _whole(v) and v >= 1),
    "trained_on.budget": ("a whole number >= 0", lambda v: _whole(v) and v >= 0),
}
"""Every checked field of ``helper.json`` (``a.b``: field ``b`` of object ``a``) and its rule."""


def check(config_path: str | Path, config: dict) -> None:
    """Refuse ``config`` (read from ``config_path``) when a field breaks its rule, naming it."""
    trained = config.get("trained_on")
    if trained is not None and not isinstance(trained, dict):
        raise ValueError(f"{config_path}: trained_on={trained!r} is not an object; re-run `helpgate distill` to "
                         "write the folder again.")
    for name, (rule, test) in RULES.items():
        head, _, tail = name.partition(".")
        value = (trained or {}).get(tail) if tail else config.get(head)
        if value is not None and not test(value):
            raise ValueError(f"{config_path}: {name}={value!r} must be {rule}; the file was edited or damaged: "
                             "re-run `helpgate distill` to write the folder again.")
