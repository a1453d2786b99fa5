"""Sources: each turns a stack's pin into a git repository holding the pinned tree as a commit.

    materialize(stack, spec, cache) -> BaseTree

The first source in the stack's list that works is used; `--source KIND` picks one. When none
works, SourceError lists one line per source: what failed and what to set.
"""

from __future__ import annotations

import importlib

from ..config import SourceSpec, StackConfig
from ..errors import SourceError
from .base import BaseTree, Cache, CacheError, Progress

# The adapters are imported when a source is used, not when the package is: a no-op `apply`
# needs only Cache and BaseTree, and archive pulls in urllib, tarfile and zipfile.
_MODULES = {"git": "gitsource", "path": "pathsource", "sdist": "archive", "wheel": "archive"}


def _adapter(kind: str):
    def run(*args, **kw):
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[kind]}"), "materialize")(*args, **kw)
    return run


_KINDS = {kind: _adapter(kind) for kind in _MODULES}


def __getattr__(name: str):
    """`sources.archive` (etc.) without importing it first, as when the package imported them."""
    if name in _MODULES.values():
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def materialize(stack: StackConfig, cache: Cache, *, kind: str | None = None, progress: Progress = None,
                offline: bool = False) -> BaseTree:
    """offline=True: only what is already cached locally (no network)."""
    specs = [s for s in stack.sources if kind is None or s.kind == kind]
    if not specs:
        have = ", ".join(s.kind for s in stack.sources)
        raise SourceError(f"stack {stack.name} has no {kind!r} source", hint=f"configured: {have}")
    failures = []
    unusable_cache = None
    for spec in specs:
        try:
            return _KINDS[spec.kind](stack, spec, cache, progress, offline=offline)
        except SourceError as e:
            failures.append(f"  {spec.describe()}: {e.one_line()}")
            unusable_cache = unusable_cache or (e if isinstance(e, CacheError) else None)
    if unusable_cache is not None:  # another source may do without the cache; none did: say why alone
        raise unusable_cache
    raise SourceError(f"no source of stack {stack.name} could provide {stack.commit}:", details="\n".join(failures))


__all__ = ["BaseTree", "Cache", "SourceSpec", "materialize"]
