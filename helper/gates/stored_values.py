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

BACKENDS = ("features", "text", "table", "tiered_table", "tiered_features")
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
    "kinds": ("a list of distinct non-empty names", lambda v: isinstance(v, list) and len(v) > 0
              and all(isinstance(n, str) and n for n in v) and len(set(v)) == len(v)),
    "prices": ("an object of finite prices > 0, one per kind", lambda v: isinstance(v, dict) and len(v) > 0
               and all(_number(p) and math.isfinite(p) and p > 0 for p in v.values())),
    "caps": ("an object of whole numbers of calls >= 0", lambda v: isinstance(v, dict)
             and all(_whole(c) and c >= 0 for c in v.values())),
    "actors": ("an object of actor names, one per renamed kind", lambda v: isinstance(v, dict)
               and all(isinstance(a, str) and a for a in v.values())),
    "cost_budget": ("a finite number >= 0", lambda v: _number(v) and math.isfinite(v) and v >= 0),
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
    kinds = config.get("kinds")
    for field in ("prices", "caps", "actors"):  # a tiered helper's prices name every kind, caps and actors only its own
        named = set(config.get(field) or {})
        if kinds is not None and (named - set(kinds) or (field == "prices" and named != set(kinds))):
            which = "every" if field == "prices" else "only"
            raise ValueError(f"{config_path}: {field}={config.get(field)!r} must name {which} kind of {kinds}; the "
                             "file was edited or damaged: write the helper folder again.")
