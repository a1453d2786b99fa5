"""pytest plugin for the semantic check (-p dsv4_patch.bump.intent_results): per node id, the outcome
and *how* it came about, written as JSON to DSV4_INTENT_RESULTS.

The semantic verdict needs more than passed/failed: an assertion that fails means "upstream still
lacks the behaviour", anything else raised (a probe that errors, a file the tree does not carry)
or a module that cannot be collected means "no verdict". So each record says the phase (collect,
setup, call, teardown), the exception type, whether it is an AssertionError, and one line of why.

The file is rewritten (whole, by rename) after every test, with "<running>" naming the test that
started last: an intent run stopped at its bound (semantic.run_intent_tests) keeps what finished.
"""

from __future__ import annotations

import json
import os

import pytest

_results: dict[str, dict] = {}
_running: dict[str, str] = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:400]


def _record(nodeid: str, rec: dict) -> None:
    prev = _results.get(nodeid)
    if prev is None or _RANK[rec["outcome"]] > _RANK[prev["outcome"]]:
        _results[nodeid] = rec


def _write() -> None:
    path = os.environ.get("DSV4_INTENT_RESULTS")
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({**_results, **({"<running>": dict(_running)} if _running else {})}, f, indent=1)
    os.replace(tmp, path)


def pytest_runtest_logstart(nodeid, location):
    _running["node"] = nodeid
    _write()


def pytest_runtest_logfinish(nodeid, location):
    _running.clear()
    _write()


def _wanted(nodeid: str, selected: list[str]) -> bool:
    """A selected id names this test, a parametrized case of it, or a file/class that holds it."""
    return any(nodeid == n or nodeid.startswith(n + "[") or nodeid.startswith(n + "::") for n in selected)


def pytest_collection_modifyitems(session, config, items):
    raw = os.environ.get("DSV4_INTENT_SELECT")  # semantic.SELECT_ENV (not imported: this runs in pytest)
    if raw is None:
        return
    selected = json.loads(raw)
    keep = [it for it in items if _wanted(it.nodeid, selected)]
    dropped = [it for it in items if not _wanted(it.nodeid, selected)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" and report.outcome == "passed":
        return
    rec = {"outcome": report.outcome, "when": report.when, "exc": "", "assertion": False, "why": ""}
    if report.skipped:
        rec["why"] = _one_line(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    elif report.failed and call.excinfo is not None:
        rec["exc"] = call.excinfo.type.__name__
        rec["assertion"] = call.excinfo.errisinstance(AssertionError)
        rec["why"] = _one_line(f"{rec['exc']}: {call.excinfo.value}")
    _record(report.nodeid, rec)


def pytest_collectreport(report):
    if report.failed:
        text = str(report.longrepr)
        errors = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
        why = errors[-1] if errors else (text.strip().splitlines() or [""])[-1]
        _record(report.nodeid or "<session>", {"outcome": "failed", "when": "collect", "exc": "", "assertion": False,
                                               "why": _one_line(why)})


def pytest_sessionfinish(session, exitstatus):
    _running.clear()
    _write()
