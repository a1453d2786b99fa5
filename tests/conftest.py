"""Shared fixtures.

`dsv4_tree(stack, patched=True, release=None)` is the one documented way a test gets an upstream
tree:
- `dsv4-patch regress` sets DSV4_TREE_<STACK> (patched) and DSV4_BASE_<STACK> (pristine pin) to
  the trees of the release under test, DSV4_RELEASE_<STACK> to its tag, and
  DSV4_TREE_<STACK>__<TAG> / DSV4_BASE_<STACK>__<TAG> (tag upper-cased, other characters `_`:
  DSV4_TREE_VLLM__V0_33_0) as well; the fixture returns those paths. `release="v0.33.0"` asks for
  that release whatever is under test (dsv4_patch.api.tree_for_tests);
- run directly under pytest, the fixture builds the tree through the engine (cached under build/
  and reused when nothing changed) and skips with the engine's one-line reason when no source of
  that stack can be reached (DeepGEMM in CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tree(stack: str, patched: bool, release: str | None) -> Path:
    from dsv4_patch.api import tree_for_tests
    from dsv4_patch.errors import SourceError

    try:
        return tree_for_tests(ROOT, stack, patched=patched, release=release)
    except SourceError as e:
        from dsv4_patch.config import load_project
        from dsv4_patch.whereabouts import explain

        what = f"{stack}@{release}" if release else stack
        pytest.skip(f"{what} upstream unreachable here: {e.one_line()} "
                    f"[{explain(load_project(ROOT).target(stack, release))}]")


@pytest.fixture(scope="session")
def dsv4_tree():
    """Factory: dsv4_tree("vllm") -> patched tree of the release under test (the primary unless
    regress runs another); dsv4_tree("vllm", patched=False) -> its pin;
    dsv4_tree("vllm", release="v0.33.0") -> that release's tree."""
    cache: dict[tuple[str, bool, str | None], Path] = {}

    def get(stack: str, patched: bool = True, release: str | None = None) -> Path:
        key = (stack, patched, release)
        if key not in cache:
            cache[key] = _tree(stack, patched, release)
        return cache[key]

    return get
