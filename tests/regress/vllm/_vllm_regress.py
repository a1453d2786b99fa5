"""Assertions on check-script results (see conftest.py)."""

from __future__ import annotations


def assert_ok(results: dict, *names: str) -> None:
    for n in names:
        assert n in results, f"sub-check {n} did not run: {sorted(results)}"
        assert results[n]["ok"], f"{n}: {results[n]['error']}"


def assert_fails(results: dict, name: str, *needles: str) -> None:
    assert name in results, f"sub-check {name} did not run"
    assert not results[name]["ok"], f"{name} passed on the unpatched tree"
    for needle in needles:
        assert needle in results[name]["error"], f"{name} failed for another reason: {results[name]['error']}"
