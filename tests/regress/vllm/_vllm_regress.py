"""Assertions on check-script results (see conftest.py). A sub-check that reports its subject absent
from the tree (checks/_harness.NotApplicable) skips the test with that reason."""

from __future__ import annotations

import pytest


def _applies(results: dict, name: str) -> None:
    why = results[name].get("not_applicable")
    if why:
        pytest.skip(f"{name} does not apply to this tree: {why}")


def assert_ok(results: dict, *names: str) -> None:
    for n in names:
        assert n in results, f"sub-check {n} did not run: {sorted(results)}"
        _applies(results, n)
        assert results[n]["ok"], f"{n}: {results[n]['error']}"


def assert_fails(results: dict, name: str, *needles: str) -> None:
    assert name in results, f"sub-check {name} did not run"
    _applies(results, name)
    assert not results[name]["ok"], f"{name} passed on the unpatched tree"
    for needle in needles:
        assert needle in results[name]["error"], f"{name} failed for another reason: {results[name]['error']}"
