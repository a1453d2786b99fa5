"""`dsv4-patch regress`: run the tests bound to each patch (Regression-Test:) against the trees.

Trees reach the tests through one documented channel: DSV4_TREE_<STACK> (patched) and
DSV4_BASE_<STACK> (the pristine pin), read by the `dsv4_tree` fixture in tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import Dsv4Error
from .patchfile import PatchFile


@dataclass
class PatchResult:
    stack: str
    patch: str
    tests: dict[str, str] = field(default_factory=dict)  # node id -> passed/failed/skipped/missing

    @property
    def outcome(self) -> str:
        vals = set(self.tests.values()) - {"deselected"}  # left out by -m/-k: not run here
        if not vals:
            return "no-tests"
        for worst in ("failed", "missing"):
            if worst in vals:
                return worst
        # one skipped test means the patch did not pass everything it is bound to
        return "skipped" if "skipped" in vals else "passed"

    def to_dict(self) -> dict:
        return {"stack": self.stack, "patch": self.patch, "outcome": self.outcome, "tests": self.tests}


@dataclass
class RegressReport:
    results: list[PatchResult]
    seconds: float
    pytest_rc: int
    first_bad: tuple[str, str] | None = None  # (stack, patch) from --bisect
    no_patches: list[str] = field(default_factory=list)  # stacks/releases whose series is empty: nothing to test

    @property
    def ok(self) -> bool:
        return all(r.outcome in ("passed", "skipped", "no-tests") for r in self.results) and self.first_bad is None

    def to_dict(self) -> dict:
        return {"ok": self.ok, "seconds": round(self.seconds, 2), "pytest_rc": self.pytest_rc,
                "first_bad": list(self.first_bad) if self.first_bad else None,
                "patches": [r.to_dict() for r in self.results], "no_patches": self.no_patches}


def tree_env(trees: dict[str, tuple[Path, Path]]) -> dict[str, str]:
    env = {}
    for stack, (patched, base) in trees.items():
        env[f"DSV4_TREE_{stack.upper()}"] = str(patched)
        env[f"DSV4_BASE_{stack.upper()}"] = str(base)
    return env


def run_pytest(root: Path, nodes: list[str], env_extra: dict[str, str], *, marker: str | None = None,
               pytest_args: tuple[str, ...] = (), log=None) -> tuple[int, dict[str, dict]]:
    """Run pytest on `nodes` in a child process; returns (exit code, outcome per node id)."""
    with tempfile.TemporaryDirectory() as td:
        results_file = Path(td) / "results.json"
        env = {**os.environ, **env_extra, "DSV4_RESULTS_FILE": str(results_file)}
        engine = str(Path(__file__).resolve().parents[1])  # so `-p dsv4_patch.pytest_results` imports
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), engine, env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "pytest", "-p", "dsv4_patch.pytest_results", "-p", "no:cacheprovider",
                "-q", "-rs", *(["-m", marker] if marker else []), *pytest_args, *nodes]
        p = subprocess.run(argv, cwd=root, env=env, stdout=log if log is not None else subprocess.DEVNULL,
                           stderr=subprocess.STDOUT)
        outcomes = json.loads(results_file.read_text()) if results_file.exists() else {}
    if p.returncode in (2, 3, 4):  # interrupted, internal error, usage error: no verdict at all
        raise Dsv4Error(f"pytest could not run the bound tests (exit {p.returncode})",
                        hint="its output above says why; check the Regression-Test ids with `dsv4-patch check`")
    return p.returncode, outcomes


def match(node: str, outcomes: dict[str, dict]) -> str:
    """A Regression-Test id matches itself and its parametrized cases (node[...]) and, for a file
    or class id, everything under it."""
    hits = [o["outcome"] for k, o in outcomes.items()
            if k == node or k.startswith(node + "[") or k.startswith(node + "::")]
    if not hits:
        return "missing"
    if all(h == "deselected" for h in hits):
        return "deselected"
    hits = [h for h in hits if h != "deselected"]
    if "failed" in hits:
        return "failed"
    return "passed" if "passed" in hits else "skipped"


def bound_tests(patches: list[PatchFile]) -> list[str]:
    seen: list[str] = []
    for p in patches:
        for n in p.metadata.regression_tests:
            if n not in seen:
                seen.append(n)
    return seen


def summarize(stack_patches: list[tuple[str, list[PatchFile]]], outcomes: dict[str, dict]) -> list[PatchResult]:
    out = []
    for stack, patches in stack_patches:
        for p in patches:
            out.append(PatchResult(stack, p.name, {n: match(n, outcomes) for n in p.metadata.regression_tests}))
    return out
