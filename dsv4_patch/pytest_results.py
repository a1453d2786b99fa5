"""A tiny pytest plugin `regress` loads (-p dsv4_patch.pytest_results): it writes each test's
outcome, keyed by node id, to the JSON file named by DSV4_RESULTS_FILE."""

from __future__ import annotations

import json
import os

_results: dict[str, dict] = {}
_RANK = {"deselected": -1, "passed": 0, "skipped": 1, "failed": 2}


def _record(nodeid: str, outcome: str, why: str = "") -> None:
    prev = _results.get(nodeid)
    if prev is None or _RANK[outcome] > _RANK[prev["outcome"]]:
        _results[nodeid] = {"outcome": outcome, "why": why[:500]}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        why = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            why = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            why = str(crash) if crash is not None else (str(report.longrepr).splitlines() or [""])[-1]
        _record(report.nodeid, report.outcome, why)


def pytest_deselected(items):
    # Left out by -m/-k: not run here, which is not the same as a missing test.
    for item in items:
        _record(item.nodeid, "deselected")


def pytest_collectreport(report):
    if report.failed:  # keep pytest's own last line: "E   ModuleNotFoundError: No module named 'triton'"
        lines = [ln.strip() for ln in str(report.longrepr).splitlines() if ln.startswith("E ")]
        why = lines[-1][1:].strip() if lines else "collection error"
        _record(report.nodeid, "failed", f"collection error: {why}")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("DSV4_RESULTS_FILE")
    if path:
        with open(path, "w") as f:
            json.dump(_results, f, indent=1)
