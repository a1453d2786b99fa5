"""Shared fixtures.

`dsv4_tree(stack, patched=True)` is the one documented way a test gets an upstream tree:
- `dsv4-patch regress` sets DSV4_TREE_<STACK> (patched) and DSV4_BASE_<STACK> (pristine pin) and
  the fixture returns those paths;
- run directly under pytest, the fixture builds the tree through the engine (cached under build/
  and reused when nothing changed) and skips with the engine's one-line reason when no source of
  that stack can be reached (DeepGEMM in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tree(stack: str, patched: bool) -> Path:
    var = ("DSV4_TREE_" if patched else "DSV4_BASE_") + stack.upper()
    if os.environ.get(var):
        return Path(os.environ[var])
    from dsv4_patch.api import ensure_tree
    from dsv4_patch.errors import SourceError

    try:
        return ensure_tree(ROOT, stack, patched=patched)
    except SourceError as e:
        from dsv4_patch.config import load_project
        from dsv4_patch.whereabouts import explain

        pytest.skip(f"{stack} upstream unreachable here: {e.one_line()} [{explain(load_project(ROOT).stack(stack))}]")


@pytest.fixture(scope="session")
def dsv4_tree():
    """Factory: dsv4_tree("vllm") -> patched tree; dsv4_tree("vllm", patched=False) -> pin."""
    cache: dict[tuple[str, bool], Path] = {}

    def get(stack: str, patched: bool = True) -> Path:
        key = (stack, patched)
        if key not in cache:
            cache[key] = _tree(stack, patched)
        return cache[key]

    return get
