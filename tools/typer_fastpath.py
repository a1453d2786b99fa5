"""Parameter coercion without pydantic for the plain cases, so that a command's start-up does
not import pydantic (~90 ms on every `dsv4-patch` run, more than a no-op `apply` itself).

Typer (0.2x) coerces every parameter that is not a boolean flag through a pydantic TypeAdapter,
built the first time the parameter is processed, whether it was given or not. Two cases need no
adapter, and are answered here exactly as Typer answers them:

- the value is None (an option that was not given): Typer's RuntimeParam.coerce returns () for
  a multi-value parameter and None otherwise, before it looks at the adapter;
- a `str` or `list[str]` parameter without a custom parser, given str values: Typer's adapter is
  `str(value)` (its _parse_cli_str) and, for a list, a list of those;
- a `Path` parameter without a custom parser, given a str (no NUL byte) that reads the same as
  a Path (not '', 'a/', 'a//b': Typer's messages quote the value as given): Typer's adapter turns
  it into a Path through pydantic (which is `Path(value)`) and hands that to its own
  coerce_cli_path, which checks exists/file_okay/readable/...; here the Path is made directly
  and handed to the same coerce_cli_path.

Anything else (an int, bytes, a custom parser, a value of another type, a str where a list is
expected) goes to Typer's own coercion, so its checks and error messages are unchanged. tests/engine/test_startup.py compares both on a table of values. Where Typer has
no such hook (another version), nothing is changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin


def _plain_kind(desc: Any) -> str | None:
    """'str', 'list' (of str), 'path' or None, for a parameter's Typer type descriptor."""
    info = getattr(desc, "parameter_info", None)
    if info is None or getattr(info, "parser", None) is not None:
        return None
    ann = desc.annotation
    if ann is str:
        return "str"
    if get_origin(ann) is list and get_args(ann) == (str,):
        return "list"
    if isinstance(ann, type) and issubclass(ann, Path) and getattr(info, "path_type", None) is None \
            and _coerce_cli_path() is not None:
        return "path"
    return None


def _coerce_cli_path():
    try:
        from typer._param_types import coerce_cli_path
    except ImportError:  # pragma: no cover (another Typer)
        return None
    return coerce_cli_path


class _Lean:
    """Stands in for Typer's RuntimeParam of one parameter; builds the real one only if needed."""

    def __init__(self, param: Any, build):
        self._param, self._build = param, build
        self._kind = _plain_kind(param.type_descriptor)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if (param.multiple or param.nargs == -1) else None
        if self._kind == "str" and type(value) is str and not (param.multiple or param.nargs == -1):
            return value
        if self._kind == "list" and type(value) in (list, tuple) and all(type(v) is str for v in value):
            return list(value)
        if self._kind == "path" and type(value) is str and "\0" not in value and not (param.multiple or param.nargs == -1):
            desc = param.type_descriptor
            path = desc.annotation(value)
            if str(path) == value:  # its error messages quote the value: only where the Path reads the same
                return _coerce_cli_path()(path, desc.parameter_info, path_type=desc.annotation, param=param, ctx=ctx)
        return self._build().coerce(value, param=param, ctx=ctx)


def install() -> bool:
    """Route Typer's parameters through _Lean. False when this Typer has no such hook."""
    try:
        from typer import core
    except ImportError:  # pragma: no cover
        return False
    cls = getattr(core, "_TyperParameter", None)
    original = getattr(cls, "get_runtime_param", None)
    if original is None or getattr(original, "_dsv4_lean", False):
        return original is not None

    def get_runtime_param(self):
        if getattr(self, "type_descriptor", None) is None:
            return original(self)
        lean = self.__dict__.get("_dsv4_lean_param")
        if lean is None:
            lean = self.__dict__["_dsv4_lean_param"] = _Lean(self, lambda: original(self))
        return lean

    get_runtime_param._dsv4_lean = True
    get_runtime_param._dsv4_original = original
    cls.get_runtime_param = get_runtime_param
    return True
