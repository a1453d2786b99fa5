""""All skipped is never green": a whole-suite run (`.ci/run`'s `pytest -q`, no paths) fails when a
group of tests that exercises the real upstreams ran nothing. Each of those tests skips, with its
reason, where its upstream cannot be had (no index, no cache) or where it needs hardware this
machine lacks; one by one that is right, but a run in which a whole group skipped has not checked
the product at all, and CI must not call it green. A run given paths (a subset) is left alone: a
developer offline still runs `pytest tests/engine`. DSV4_TEST_FLOOR=1 applies the floor to any run
(its own test uses that), =0 to none.

Only the tests that reach an upstream count: those that take a tree through the tool (the
`dsv4_tree` fixture, directly or through another fixture) or are marked `slow` ("builds or
downloads an upstream tree"); each group also holds tests of its own logic that pass offline.
tests/conftest.py tags them (TAG in the item's user_properties, which pytest-xdist sends with each
report to the controller's hooks: one `setup` report per test run, a `call` report for each that
got past its setup).

A run that selects (`-k`, `-m`, `--lf`, `--deselect`) is left alone too: `pytest -m gpu` on a
machine without a GPU skips what it selected, as it should."""

from __future__ import annotations

import os

# The groups that run against the real upstreams (trees, venvs, upstream CI), by node-id prefix.
GROUPS = (
    "tests/regress/vllm/",
    "tests/regress/sglang/",
    "tests/upstream_ci/",
    "tests/newcomer/test_newcomer_session.py",
)
ENV = "DSV4_TEST_FLOOR"
TAG = "dsv4_upstream"  # user_properties name of a test that reaches an upstream


def reaches_upstream(item) -> bool:
    return "dsv4_tree" in getattr(item, "fixturenames", ()) or item.get_closest_marker("slow") is not None


class Floor:
    def __init__(self, groups: tuple[str, ...] = GROUPS):
        self.groups = groups
        self.ran = {g: 0 for g in groups}
        self.passed = {g: 0 for g in groups}
        self.why: dict[str, str] = {}  # a group's first skip reason

    def _group(self, nodeid: str) -> str | None:
        return next((g for g in self.groups if nodeid.startswith(g)), None)

    def add(self, report) -> None:
        g = self._group(report.nodeid)
        if g is None or not any(p[0] == TAG for p in getattr(report, "user_properties", ())):
            return
        if report.when == "setup":
            self.ran[g] += 1
        if report.when == "call" and report.passed:
            self.passed[g] += 1
        if report.skipped and g not in self.why:
            longrepr = report.longrepr
            self.why[g] = str(longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr)

    def failures(self) -> list[str]:
        """One line per group that ran tests of which none passed."""
        return [f"no test of {g} passed ({self.ran[g]} ran; first skip: {self.why.get(g, 'none')})"
                for g in self.groups if self.ran[g] and not self.passed[g]]


def applies(config, whole_suite: bool) -> bool:
    want = os.environ.get(ENV, "").strip()
    if want in ("0", "1"):
        return want == "1"
    o = getattr(config, "option", None)
    selects = any(getattr(o, name, None) for name in ("keyword", "markexpr", "lf", "deselect"))
    return whole_suite and not selects and not hasattr(config, "workerinput")
