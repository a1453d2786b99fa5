"""Shared by the check scripts: run named sub-checks, print one JSON line."""

from __future__ import annotations

import json
import sys
import traceback
from contextlib import contextmanager

_results: dict[str, dict] = {}


def check(fn):
    try:
        fn()
        _results[fn.__name__] = {"ok": True, "error": ""}
    except BaseException as e:  # noqa: BLE001 - a sub-check's failure is data here
        tb = traceback.format_exc(limit=int(__import__("os").environ.get("DSV4_TB_LIMIT", "3")))
        _results[fn.__name__] = {"ok": False, "error": f"{type(e).__name__}: {e}\n{tb}"}
    return fn


def report() -> None:
    sys.stdout.flush()
    print("DSV4-CHECK " + json.dumps(_results), flush=True)


_MISSING = object()


@contextmanager
def swapped(namespace, name: str, value):
    """namespace.name is value inside the block; afterwards what it was (absent again if it was absent:
    torch.ops namespaces resolve a missing kernel lazily, so deleting is not the same as restoring)."""
    orig = namespace.__dict__.get(name, _MISSING)
    setattr(namespace, name, value)
    try:
        yield
    finally:
        if orig is _MISSING:
            delattr(namespace, name)
        else:
            setattr(namespace, name, orig)
