"""Generate command-line parsers from config dataclasses.

Every command has one dataclass whose fields carry a one-line docstring (a string literal right
under the field). This module turns such a class into argparse options, so the CLI, the defaults
and the help text never drift apart: ``out_dir: str = "runs"`` becomes ``--out-dir``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from pathlib import Path


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (and its bases), read from its source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, after in zip(body, body[1:] + [None]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _unwrap_optional(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _option_kwargs(annotation, default) -> dict:
    annotation, _ = _unwrap_optional(annotation)
    origin = typing.get_origin(annotation)
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is typing.Literal:
        choices = list(typing.get_args(annotation))
        return {"choices": choices, "type": type(choices[0])}
    if origin in (list, tuple):
        (element, *_) = typing.get_args(annotation) or (str,)
        element, _ = _unwrap_optional(element)
        if typing.get_origin(element) is typing.Literal:
            choices = list(typing.get_args(element))
            return {"nargs": "+", "choices": choices, "type": type(choices[0])}
        return {"nargs": "+", "type": element}
    if annotation in (int, float, str, Path):
        return {"type": annotation}
    return {"type": str}


def add_dataclass_options(parser: argparse.ArgumentParser, cls: type) -> None:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for item in dataclasses.fields(cls):
        if not item.init:
            continue
        if item.default is not dataclasses.MISSING:
            default = item.default
        elif item.default_factory is not dataclasses.MISSING:
            default = item.default_factory()
        else:
            default = None
        kwargs = _option_kwargs(hints[item.name], default)
        help_text = docs.get(item.name, "")
        if default is not None and kwargs.get("action") is None:
            help_text += f" (default: {default})"
        help_text = help_text.replace("%", "%%")  # argparse formats help strings with %
        parser.add_argument(
            "--" + item.name.replace("_", "-"),
            dest=item.name,
            default=default,
            required=default is None and not _unwrap_optional(hints[item.name])[1]
            and item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING,
            help=help_text,
            **kwargs,
        )


def config_from_args(cls: type, namespace: argparse.Namespace):
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        annotation, _ = _unwrap_optional(hints[name])
        if typing.get_origin(annotation) is tuple and isinstance(value, list):
            values[name] = tuple(value)
    return cls(**values)


def parse_config(cls: type, argv: list[str] | None = None, prog: str | None = None,
                 description: str | None = None):
    """Parse ``argv`` into an instance of the dataclass ``cls``."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description or (inspect.getdoc(cls) or "").split("\n\n")[0]
    )
    add_dataclass_options(parser, cls)
    return config_from_args(cls, parser.parse_args(argv))
