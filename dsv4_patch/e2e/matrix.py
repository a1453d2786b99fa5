"""The verification matrix: for each patch of each stack, which verification levels passed, on which hardware.

Built only from the result files committed with the stack (record.py). A level nobody recorded is
absent, a result recorded for an earlier version of a patch file, or at another pin of the release
(a result that names its pin), is `stale`, a pass at a test level
whose test code (the patch's bound test modules, their helpers and conftests: testcode.py) changed
after the run is `stale-tests`, and the newest result per (level, hardware) wins, so a later failure
hides an earlier pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import load_project
from ..patchfile import parse_patch_bytes
from .record import LEVELS, LevelResult, load_results, patch_fingerprints, same_pin
from .testcode import CodeDates, files_of_tests

# Levels whose results come from running the patches' bound tests: their test code can move on.
TEST_LEVELS = ("unit", "integration", "gpu")


@dataclass
class Cell:
    level: str
    hardware: str
    status: str  # passed | failed | stale | stale-tests
    date: str
    source: Path
    changed_tests: list[str] = field(default_factory=list)  # stale-tests: the test files changed since


@dataclass
class PatchRow:
    name: str
    cells: list[Cell] = field(default_factory=list)

    def passed(self, level: str) -> list[str]:
        return sorted(c.hardware for c in self.cells if c.level == level and c.status == "passed")

    def cells_for(self, level: str) -> list[Cell]:
        return [c for c in self.cells if c.level == level]

    def to_dict(self) -> dict:
        return {
            "patch": self.name,
            "levels": {
                lv: [{"hardware": c.hardware, "status": c.status, "date": c.date, "source": str(c.source),
                      **({"changed_tests": c.changed_tests} if c.changed_tests else {})}
                     for c in self.cells_for(lv)]
                for lv in LEVELS if self.cells_for(lv)
            },
        }


@dataclass
class StackMatrix:
    stack: str
    rows: list[PatchRow]
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"stack": self.stack, "patches": [r.to_dict() for r in self.rows], "problems": self.problems}


def bound_tests(patch_dir: Path) -> dict[str, list[str]]:
    """Each patch's bound test ids (Regression-Test:), by file name; a patch that does not parse has none."""
    out = {}
    for p in patch_fingerprints(patch_dir):
        try:
            out[p["name"]] = list(parse_patch_bytes((patch_dir / p["name"]).read_bytes(), p["name"]).metadata.regression_tests)
        except Exception:  # a malformed patch is the lint's business, as in stack_matrix
            out[p["name"]] = []
    return out


def stack_matrix(stack: str, patch_dir: Path, root: Path | None = None, code: CodeDates | None = None,
                 pin: str = "") -> StackMatrix:
    """`root` (the checkout) and `code`: compare test-level passes with today's test code. `pin`: the
    release's pin today; a result recorded at another one is stale (a pin move that leaves the patch
    files byte-identical says nothing about whether they still do what they did)."""
    problems: list[str] = []
    try:
        current = {p["name"]: p["sha256"] for p in patch_fingerprints(patch_dir)}
    except Exception as e:  # a broken series is the lint's business; show it, do not crash the table
        return StackMatrix(stack, [], [getattr(e, "message", str(e))])
    results, bad = load_results(patch_dir)
    problems += bad
    problems += [f"{r.path}: recorded for stack {r.stack!r}, found under {stack!r}" for r in results if r.stack != stack]
    results = [r for r in results if r.stack == stack]
    tests_of = bound_tests(patch_dir) if root is not None else {}
    code = code or (CodeDates(root) if root is not None else None)
    rows = []
    for name, sha in current.items():
        latest: dict[tuple[str, str], LevelResult] = {}
        for r in results:
            if name not in r.patches:
                continue
            key = (r.level, r.hardware)
            if key not in latest or r.date > latest[key].date:
                latest[key] = r
        cells = []
        for (level, hw), r in sorted(latest.items(), key=lambda kv: (LEVELS.index(kv[0][0]), kv[0][1])):
            moved_pin = bool(pin and r.pin and not same_pin(r.pin, pin))
            status = r.status if r.patches[name] == sha and not moved_pin else "stale"
            changed = []
            if status == "passed" and level in TEST_LEVELS and code is not None:
                changed = code.changed_since(files_of_tests(root, tests_of.get(name, [])), r.tests, r.date)
                status = "stale-tests" if changed else status
            cells.append(Cell(level, hw, status, r.date, r.path, changed))
        rows.append(PatchRow(name, cells))
    return StackMatrix(stack, rows, problems)


def compute_matrix(root: Path, stacks: list[str] | None = None) -> list[StackMatrix]:
    project = load_project(root)
    code = CodeDates(project.root)
    out = []
    for s in project.targets(stacks):  # every release of each stack, each with its own results/
        m = stack_matrix(s.name, s.patch_dir, project.root, code, pin=s.commit)
        m.stack = s.label  # vllm, vllm@v0.33.0
        out.append(m)
    return out
