"""The command line of a config dataclass: parse it with ``tyro``, run it, and turn user errors
into one line.

Every command has one dataclass whose fields carry a one-line docstring (a string literal right
under the field). ``tyro`` reads those docstrings as the help text, so the CLI, the defaults and
the help never drift apart: ``out_dir: str = "runs"`` becomes ``--out-dir``, a ``bool`` becomes
``--flag`` / ``--no-flag``, a list takes several values (``--budget 1 2 3``), a ``Literal`` lists
its choices and an optional field also takes ``None``.

A user error (a bad value, a missing or malformed file, a missing optional extra) is printed as
one line, ``PROG: error: MESSAGE``, with exit code 2; ``--debug`` shows the traceback instead.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # bad values and malformed data: the modules' own errors subclass it (SchemaError, ...)
    OSError,  # a missing, unreadable or unwritable path, a model that cannot be loaded, a full disk
    ImportError,  # an optional extra that is not installed (ray, textworld)
)
"""Exceptions that mean the input is wrong, not the code: reported as one line."""

DEBUG_FLAG = "--debug"
"""Global flag: show the traceback of a user error instead of the one-line message."""


def parse_config(cls: type, argv: list[str] | None = None, prog: str | None = None,
                 description: str | None = None):
    """Parse ``argv`` into an instance of the dataclass ``cls`` (``--help`` exits 0, a bad flag 2)."""
    import tyro

    return tyro.cli(cls, args=sys.argv[1:] if argv is None else list(argv), prog=prog,
                    description=description)


def split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug``, and whether it was there (it may stand anywhere)."""
    return [a for a in argv if a != DEBUG_FLAG], DEBUG_FLAG in argv


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line; an OS error names its path."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.strerror}: {error.filename}"
    elif isinstance(error, ImportError) and not str(error):
        text = f"cannot import {error.name}"
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def check_finite(config) -> None:
    """Refuse a NaN or infinite number in any float option (NaN passes every ``<``/``>`` check)."""
    import dataclasses
    import math

    if not dataclasses.is_dataclass(config):
        return
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_finite(value)  # a command's nested config (the pipeline's stages)
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise ValueError(f"--{item.name.replace('_', '-')} {bad[0]}: give a finite number.")


def run_reporting_errors(prog: str, run: Callable, config, debug: bool = False) -> tuple[int, object]:
    """``(0, run(config))``; a user error prints ``PROG: error: MESSAGE`` and gives ``(2, None)``."""
    try:
        check_finite(config)
        return 0, run(config)
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"{prog}: error: {one_line(error)} (--debug shows the traceback)", file=sys.stderr)
        return 2, None
