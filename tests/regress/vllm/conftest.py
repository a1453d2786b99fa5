"""Fixtures for the vLLM regression tests (integration level): one set of tests for every release.

Which release a test runs against:
- under `dsv4-patch regress vllm@TAG`, `bump` or `pin` (DSV4_TREE_VLLM and DSV4_BASE_VLLM set): the
  release under test, whatever it is -- a carried one, or a release nobody has seen (its trees are
  what the variables point at; DSV4_RELEASE_VLLM names it);
- under plain pytest: every release the stack carries (patches/stacks.toml), one parametrized case
  each (`test_decision_table[v0.33.0]`), the release's own trees built through the engine
  (`dsv4_tree(..., release=TAG)`). A case runs only where that release's series binds the test
  (`Regression-Test:` trailers), so plain pytest runs each release's bound tests, as regress does;
  a test bound by no series runs everywhere, and one marked `fixed_upstream(PATCH)` (evidence that
  upstream fixed what PATCH fixes) only where the series does not carry PATCH. The others skip and
  say why.

Nothing here names a version. The venv recipe is read from the tree (_vllm_venvs.base_venv_for: the
torch it pins); where upstream's API differs between releases, the check scripts probe the tree's
code (a function, a parameter) and report a sub-check that does not apply, which the test skips with
that reason (_vllm_regress.assert_ok).

The patched upstream modules are imported from a venv of the release (see _vllm_venvs.py) with the
stack's patched Python files overlaid by dsv4_patch.build.build_overlay, and exercised on CPU. The
venvs live in a cache outside the repo (DSV4_VENV_CACHE, default ~/.cache/dsv4-patch/venvs):

    vllm-<version>-cpu-<recipe>/base             the release as its CPU recipe installs it (no overlay)
    vllm-<version>-cpu-<recipe>/patched-<key>    a hard-link clone of base with the patched files overlaid

`vllm_check(name, patched=True)` runs tests/regress/vllm/checks/<name>.py inside one venv, once per
session and release, and returns its JSON: {sub-check: {"ok": bool, "error": str}}. Each check
script is the same code for the patched and the unpatched tree; the tests expect it to pass on the
first and fail on the second.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from _vllm_venvs import ROOT, base_venv_for, check_runner, overlay_pair, release_version

CHECKS = Path(__file__).resolve().parent / "checks"
STACK = "vllm"


@dataclass(frozen=True)
class Release:
    """One release the tests run against: `tag` (None: the release under test whose trees the
    environment gives) and the id its cases carry."""
    id: str
    tag: str | None


def _given() -> bool:
    return bool(os.environ.get("DSV4_TREE_VLLM"))


@functools.cache
def _stack():
    from dsv4_patch.config import load_project

    return load_project(ROOT).stacks[STACK]


def releases() -> list[Release]:
    if _given():
        return [Release(os.environ.get("DSV4_RELEASE_VLLM") or "under-test", None)]
    return [Release(cfg.release or cfg.tag or cfg.commit, cfg.release or cfg.tag) for cfg in _stack().all_releases()]


@functools.cache
def _series(tag: str) -> tuple[frozenset[str], frozenset[str]]:
    """(node ids the release's series binds, names of its patches without .patch)."""
    from dsv4_patch.stack import load_stack

    patches = load_stack(next(c for c in _stack().all_releases() if (c.release or c.tag) == tag)).patches
    return (frozenset(n for p in patches for n in p.metadata.regression_tests),
            frozenset(p.name.removesuffix(".patch") for p in patches))


def pytest_configure(config):
    config.addinivalue_line("markers", "fixed_upstream(patch): evidence that upstream fixed what the named "
                                       "patch fixes; runs on releases whose series does not carry it")


def _why_not_here(item, rel: Release) -> str | None:
    """Why a plain-pytest case does not run against `rel`, or None."""
    node = item.nodeid.split("[", 1)[0]
    bound, names = _series(rel.tag)
    fixed = item.get_closest_marker("fixed_upstream")
    if fixed:
        patch = fixed.args[0]
        return (f"{rel.id}'s series carries {patch}: this is the evidence for dropping it where "
                f"upstream fixed it") if patch in names else None
    if node in bound:
        return None
    elsewhere = [r.id for r in releases() if r.tag is not None and node in _series(r.tag)[0]]
    return (f"{rel.id}'s series binds no patch to {node.removeprefix('tests/regress/vllm/')} "
            f"(bound at {', '.join(elsewhere)})") if elsewhere else None


def pytest_collection_modifyitems(config, items):
    """Plain pytest: each case only where its release's series binds it (see the module docstring),
    decided before any tree or venv is built for it."""
    if _given():
        return
    for item in items:
        rel = getattr(getattr(item, "callspec", None), "params", {}).get("vllm_release")
        if isinstance(rel, Release):
            why = _why_not_here(item, rel)
            if why:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session", params=releases(), ids=lambda r: r.id)
def vllm_release(request) -> Release:
    return request.param


@pytest.fixture(scope="session")
def vllm_trees(vllm_release, dsv4_tree) -> tuple[Path, Path]:
    """(patched, pristine) trees of the release."""
    if vllm_release.tag is None:
        patched, base = os.environ.get("DSV4_TREE_VLLM"), os.environ.get("DSV4_BASE_VLLM")
        if not base:
            pytest.fail("DSV4_TREE_VLLM is set but DSV4_BASE_VLLM is not: the unpatched venv needs the pristine tree")
        return Path(patched), Path(base)
    return (dsv4_tree(STACK, release=vllm_release.tag),
            dsv4_tree(STACK, patched=False, release=vllm_release.tag))


@pytest.fixture(scope="session")
def vllm_venvs(vllm_trees, dsv4_tree) -> dict[bool, Path]:
    patched_tree, base_tree = vllm_trees
    primary = _stack()
    donor = lambda: dsv4_tree(STACK, patched=False, release=primary.tag or primary.release)  # noqa: E731
    base = base_venv_for(base_tree, donor)
    return overlay_pair(base_tree, patched_tree, release_version(base_tree), base_venv=base)


@pytest.fixture(scope="session")
def vllm_check(vllm_venvs, vllm_trees):
    return check_runner(vllm_venvs, [CHECKS], vllm_trees[0])
