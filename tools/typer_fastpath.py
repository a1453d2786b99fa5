"""Parameter coercion without pydantic for the plain cases, so that a command's start-up does
not import pydantic (~90 ms on every `dsv4-patch` run, more than a no-op `apply` itself).

Typer (0.2x) coerces every parameter that is not a boolean flag through a pydantic TypeAdapter,
built the first time the parameter is processed, whether it was given or not. Two cases need no
adapter, and are answered here exactly as Typer answers them:

- the value is None (an option that was not given): Typer's RuntimeParam.coerce returns () for
  a multi-value parameter and None otherwise, before it looks at the adapter;
- a `str` or `list[str]` parameter without a custom parser, given str values: Typer's adapter is
  `str(value)` (its _parse_cli_str) and, for a list, a list of those.

Anything else (a Path or an int that was given, bytes, a custom parser, a value of another type,
a str where a list is expected) goes to Typer's own coercion, so its checks and error messages
are unchanged. tests/engine/test_startup.py compares both on a table of values. Where Typer has
no such hook (another version), nothing is changed.
"""

from __future__ import annotations

from typing import Any, get_args, get_origin


def _plain_str(desc: Any) -> str | None:
    """'str', 'list' (of str) or None, for a parameter's Typer type descriptor."""
    info = getattr(desc, "parameter_info", None)
    if info is None or getattr(info, "parser", None) is not None:
        return None
    ann = desc.annotation
    if ann is str:
        return "str"
    if get_origin(ann) is list and get_args(ann) == (str,):
        return "list"
    return None


class _Lean:
    """Stands in for Typer's RuntimeParam of one parameter; builds the real one only if needed."""

    def __init__(self, param: Any, build):
        self._param, self._build = param, build
        self._kind = _plain_str(param.type_descriptor)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if (param.multiple or param.nargs == -1) else None
        if self._kind == "str" and type(value) is str and not (param.multiple or param.nargs == -1):
            return value
        if self._kind == "list" and type(value) in (list, tuple) and all(type(v) is str for v in value):
            return list(value)
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
