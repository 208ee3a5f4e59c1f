"""The command line of a config dataclass: parse it with ``tyro``, run it, and turn user errors
into one line.

Every command has one dataclass whose fields carry a one-line docstring (a string literal right
under the field). ``tyro`` reads those docstrings as the help text, so the CLI, the defaults and
the help never drift apart: ``out_dir: str = "runs"`` becomes ``--out-dir``, a ``bool`` becomes
``--flag`` / ``--no-flag``, a list takes several values (``--budgets 1 2 3``), a ``Literal`` lists
its choices and an optional field also takes ``None``.

A user error (a bad value, a missing or malformed file, a missing optional extra) is printed as
one line, ``PROG: error: MESSAGE``, with exit code 2; ``--debug`` shows the traceback instead.
Any other exception is also one line, naming its type and the innermost frame outside the
libraries: raised in a plug-in's own code (or out of memory) it is the user's to fix (exit 2);
raised in this project's code it is reported as an internal error, a bug (exit 1). ``--debug``
shows the traceback of either. The user's Ctrl-C stops a command with one line, exit 130; a
``KeyboardInterrupt`` a plug-in raises itself is its error (``user_interrupted`` tells them apart). A
reader that closes the pipe (``helpgate ... --help | head -1``) ends the command quietly (``quiet_pipe``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
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
                 description: str | None = None, experiments: bool = False):
    """Parse ``argv`` into an instance of the dataclass ``cls`` (``--help`` exits 0; a bad flag or a
    value that is not of the option's type exits 2 with one line, ``PROG: error: ...``). The product's
    command line hides the experiment options (``helper.experiment_options``); ``experiments`` shows them."""
    import contextlib
    import io

    import tyro

    from helper.experiment_options import as_config, command_view

    caught = io.StringIO()
    try:
        with contextlib.redirect_stderr(caught):  # tyro's error box, made one line below
            parsed = tyro.cli(command_view(cls, not experiments, range_hint),
                              args=sys.argv[1:] if argv is None else list(argv), prog=prog, description=description)
            return as_config(parsed, cls)
    except SystemExit as stop:
        if stop.code not in (0, None):
            print(f"{prog or cls.__name__}: error: {box_line(caught.getvalue())}", file=sys.stderr)
        elif caught.getvalue():
            sys.stderr.write(caught.getvalue())
        raise


def range_hint(name: str):
    """tyro's help hint for the option ``name``: its default and, where ``helper.option_ranges`` holds one, its
    range (``(default: 6; in [1, 100,000])``); None where it has no range."""
    import tyro

    from helper.option_ranges import RANGES

    allowed = RANGES.get(name)
    if allowed is None:
        return None
    return tyro.conf.arg(help_behavior_hint=lambda default, text=allowed.text(): f"(default: {default}; {text})")


def command_flags(cls: type, experiments: bool = False) -> dict[str, str]:
    """Each flag of ``cls``'s command line (``--x`` of a ``--x`` / ``--no-x`` pair) with its help text, from the
    parser tyro builds (``helpgate``'s, or with ``experiments`` the experiment entry's)."""
    import warnings

    import tyro

    from helper.experiment_options import command_view

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # get_parser: the parser itself is what is counted
        parser = tyro.extras.get_parser(command_view(cls, not experiments, range_hint))
    return {action.option_strings[0]: action.help or "" for action in parser._actions
            if action.option_strings and action.option_strings[0].startswith("--") and action.dest != "help"}


BOX_EDGES = "╭╮╰╯│─|+"


def box_line(text: str) -> str:
    """tyro's error box as one line: the message under its title, up to the next rule (help text
    follows it), with the flag's type said in words (``--bins abc: not a whole number``). The box
    is drawn with edges on a terminal and without them into a file; both read the same."""
    import re

    segments, current = [], []
    for line in text.splitlines():
        if line.strip().startswith(("╭", "╰")):  # a border: the title sits in the top one
            continue
        inner = line.strip().strip(BOX_EDGES).strip()
        if inner and set(inner) <= set(BOX_EDGES + "-"):  # a rule
            segments.append(current)
            current = []
        elif inner:
            current.append(inner)
    segments.append(current)
    # A title alone ("Value error", "Unrecognized options") is a segment of its own where there are no borders.
    texts = [" ".join(" ".join(seg).split()) for seg in segments if seg]
    texts = [t for t in texts if not re.fullmatch(r"[A-Z][a-z ]*", t)]
    lines = texts[:1]
    message = " ".join(" ".join(lines).split()) or " ".join(text.split())[:300]
    parsed = re.match(r"Error parsing (--[\w-]+): invalid literal for int\(\) with base 10: '(.*)'$", message)
    if parsed:
        return f"{parsed[1]} {parsed[2]}: not a whole number (helpgate's --help lists each option's type)."
    parsed = re.match(r"Error parsing (--[\w-]+): could not convert string to float: '(.*)'$", message)
    if parsed:
        return f"{parsed[1]} {parsed[2]}: not a number (helpgate's --help lists each option's type)."
    parsed = re.match(r"Error parsing (--[\w-]+): .*instantiated from (\[.*?\])", message)
    if parsed:
        return f"{parsed[1]} {' '.join(eval_list(parsed[2]))}: not of the option's type (its --help says which)."
    return message.replace("Perhaps you meant:", "; perhaps you meant") + " (--help lists the options)"


def eval_list(text: str) -> list[str]:
    """``['1', 'x']`` as printed by tyro, back as its items (no code is run)."""
    import ast

    try:
        items = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return [text]
    return [str(item) for item in items] if isinstance(items, list) else [text]


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


INTERRUPTED_EXIT = 130
"""The exit code of a command stopped by the user's Ctrl-C (128 + SIGINT, as a shell reports it)."""
SIGPIPE_EXIT = 141
"""The exit code of a command whose output's reader went away (128 + SIGPIPE, as a shell reports a
tool killed by it): ``helpgate prm train --help | head -1`` ends quietly."""
_ctrl_c = {"watching": False, "pressed": False}


def user_interrupted() -> bool:
    """Whether a ``KeyboardInterrupt`` is the user's: a Ctrl-C (SIGINT) reached this process while a command ran
    (``run_reporting_errors`` watches), or nothing watches (outside the CLI, any is taken as the user's)."""
    return not _ctrl_c["watching"] or _ctrl_c["pressed"]


def _on_ctrl_c(signum, frame):
    _ctrl_c["pressed"] = True
    raise KeyboardInterrupt


def _watch_ctrl_c() -> Callable[[], None]:
    """Note a SIGINT before it raises; the function that stops watching. A handler the process already had (a
    library's, another tool's) still runs after the note and is put back after. Where SIGINT is ignored (or left to
    end the process) nothing is installed: no KeyboardInterrupt can then be a Ctrl-C."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if not callable(previous):
        _ctrl_c.update(watching=True, pressed=False)

        def unwatch() -> None:
            _ctrl_c["watching"] = False
        return unwatch
    if previous is signal.default_int_handler:
        handler = _on_ctrl_c
    else:
        def handler(signum, frame):
            _ctrl_c["pressed"] = True
            return previous(signum, frame)
    signal.signal(signal.SIGINT, handler)
    _ctrl_c.update(watching=True, pressed=False)

    def stop() -> None:
        signal.signal(signal.SIGINT, previous)
        _ctrl_c["watching"] = False
    return stop


def quiet_pipe(main: Callable[[], int]) -> int:
    """``main()``, ending quietly with ``SIGPIPE_EXIT`` when the reader of stdout went away (``| head -1``)."""
    try:
        return main()
    except BrokenPipeError:
        # Whatever is still buffered for the closed pipe would raise again at exit: send it nowhere.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # a stdout with no file behind it (a test's capture)
            pass
        return SIGPIPE_EXIT


def run_reporting_errors(prog: str, run: Callable, config, debug: bool = False) -> tuple[int, object]:
    """``(0, run(config))``; a user error prints ``PROG: error: MESSAGE`` and gives ``(2, None)``."""
    from helper import option_ranges

    stop_watching = _watch_ctrl_c()
    try:
        check_finite(config)
        option_ranges.check(config)  # every numeric option in its range, before any work
        return 0, run(config)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted (Ctrl-C); what finished is kept (a collection resumes when run again with "
              "the same arguments).", file=sys.stderr)
        return INTERRUPTED_EXIT, None
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"{prog}: error: {one_line(error)} (--debug shows the traceback)", file=sys.stderr)
        return 2, None
    except Exception as error:  # not a known user error: say what and where, never hide it
        if debug:
            raise
        where, ours = origin(error)
        if ours and not isinstance(error, MemoryError):
            print(f"{prog}: internal error: {type(error).__name__} at {where}: {one_line(error)}; this is a bug, "
                  "please report it with the traceback that --debug shows.", file=sys.stderr)
            return 1, None
        print(f"{prog}: error: {type(error).__name__} raised at {where}: {one_line(error)} "
              "(--debug shows the traceback)", file=sys.stderr)
        return 2, None
    finally:
        stop_watching()


PACKAGES = ("agile", "helper", "prm", "tabular_rl", "trajectories")
"""This project's packages: an exception raised in them that is not a user error is a bug."""


def origin(error: BaseException) -> tuple[str, bool]:
    """``("file:line in function", raised in this project's code)`` for the innermost frame that is
    not a library's (a plug-in's own code is named as such)."""
    import sysconfig
    import traceback
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    libraries = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        path = Path(frame.filename).resolve()
        if any(path.is_relative_to(lib) for lib in libraries) or "site-packages" in path.parts:
            continue
        inside = path.is_relative_to(root)
        shown = path.relative_to(root) if inside else path
        mine = inside and path.relative_to(root).parts[0] in PACKAGES
        return f"{shown}:{frame.lineno} in {frame.name}" + ("" if mine else " (plug-in code)"), mine
    last = frames[-1] if frames else None
    return (f"{last.filename}:{last.lineno} in {last.name}" if last else "unknown place"), True
