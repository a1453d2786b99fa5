"""What the two mutation scripts share (benchmarks/mutate_kernels.py, benchmarks/mutate_engine.py):
the mutant record, the operators common to both (comparison flips, and/or swap, dropping a `not`, dropping
a guard that raises), running pytest in a child forked from a parent that has already imported the heavy
modules, spreading mutants over forked workers that each own a sandbox copy, and the score table.

A mutant is killed when a test fails (or errors, or times out); the first failing test is its killer.
A pytest run that ends without any failing test but with an interrupted, internal or usage error
(exit 2, 3, 4: a conftest that does not import, an unknown option) is an *error*: the tests did not
run, so the mutant is neither killed nor survived. Children never write bytecode: two mutants of one
file can have the same size and be written within the same second, and a `.pyc` checked by mtime and
size would then serve the earlier mutant's code.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Mutant:
    target: str
    index: int
    line: int
    what: str
    in_jit: bool = False
    outcome: str = ""
    killer: str = ""
    seconds: float = 0.0


CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq}


class Sites(ast.NodeTransformer):
    """Walks a module; numbers every mutation site; with `apply=k` rewrites the k-th one. This base
    makes the common operators; a subclass adds its own (and may widen `cmp_swap`)."""

    cmp_swap = CMP_SWAP

    def __init__(self, apply: int | None = None):
        self.apply = apply
        self.sites: list[tuple[int, str, bool]] = []
        self._jit = 0
        self._skip = 0

    def _site(self, node, what: str) -> bool:
        if self._skip:
            return False
        self.sites.append((node.lineno, what, self._jit > 0))
        return self.apply == len(self.sites) - 1

    def visit_Compare(self, node):
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            new = self.cmp_swap.get(type(op))
            if new and self._site(node, f"{op_text(op)} -> {op_text(new())} in `{short(node)}`"):
                node.ops[i] = new()
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if self._site(node, f"{op_text(node.op)} -> {'or' if isinstance(node.op, ast.And) else 'and'} in "
                            f"`{short(node)}`"):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (ast.Not, ast.USub, ast.Invert)) and not isinstance(node.operand, ast.Constant):
            if self._site(node, f"drop `{op_text(node.op)}` in `{short(node)}`"):
                return node.operand
        return node

    def visit_Raise(self, node):
        return node  # the message of a raise is not behaviour under test; its guard is (visit_If)

    def visit_Assert(self, node):
        node.test = self.visit(node.test)
        return node

    def visit_If(self, node):
        # a guard whose body raises: drop the guard (the check is never made)
        raises = any(isinstance(n, ast.Raise) for n in node.body)
        node.test = self.visit(node.test)
        if raises and self._site(node, f"drop the check `if {short(node.test)}: raise ...`"):
            node.test = ast.copy_location(ast.Constant(False), node.test)
        node.body = [self.visit(n) for n in node.body]
        node.orelse = [self.visit(n) for n in node.orelse]
        return node


def op_text(op) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
            ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|",
            ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!=", ast.And: "and", ast.Or: "or", ast.Not: "not", ast.USub: "-",
            ast.Invert: "~", ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}[type(op)]


def short(node) -> str:
    s = ast.unparse(node)
    return s if len(s) <= 60 else s[:57] + "..."


def source_sites(sites_cls, source: str) -> list[tuple[int, str, bool]]:
    """(line, mutation, inside @triton.jit) of every mutation site of a module's source."""
    v = sites_cls()
    v.visit(ast.parse(source))
    return v.sites


def mutate_source(sites_cls, source: str, index: int) -> str:
    """The source with its index-th mutation applied (as ast.unparse writes it)."""
    tree = ast.fix_missing_locations(sites_cls(apply=index).visit(ast.parse(source)))
    return ast.unparse(tree) + "\n"


def enumerate_mutants(sites_cls, target: str, path: Path) -> list[Mutant]:
    """Every mutant of the module at `path`, numbered as mutate_source numbers them."""
    return [Mutant(target, i, line, what, jit)
            for i, (line, what, jit) in enumerate(source_sites(sites_cls, path.read_text()))]


class FirstFailure:
    """pytest plugin: the node id of the first failing test (or collection)."""

    def __init__(self):
        self.nodeid = ""

    def pytest_runtest_logreport(self, report):
        if report.failed and not self.nodeid:
            self.nodeid = report.nodeid

    def pytest_collectreport(self, report):
        if report.failed and not self.nodeid:
            self.nodeid = f"{report.nodeid} (collection)"


# One pytest run of a mutant: (extra pytest arguments, environment changes; None removes a variable).
Run = tuple[list[str], dict[str, str | None]]


def _child(box: Path, args: list[str], runs: list[Run], result_file: Path) -> None:
    import pytest

    os.chdir(box)
    sys.path.insert(0, str(box))
    os.environ["PYTHONPATH"] = str(box)
    killer = ""
    for extra, env in runs:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        plugin = FirstFailure()
        rc = pytest.main([*args, *extra], plugins=[plugin])
        if not plugin.nodeid and rc in (2, 3, 4):  # interrupted, internal or usage error: no verdict
            killer = f"error: pytest exit {rc}"
            break
        if plugin.nodeid or rc not in (0, 5):
            killer = plugin.nodeid or f"pytest exit {rc}"
            break
    result_file.write_text(json.dumps({"killer": killer}))
    os._exit(0)


def fork_pytest(box: Path, args: list[str], runs: list[Run], timeout: float) -> tuple[str, float]:
    """Run pytest (`args` + each run's extras, in order, until one fails) in a child forked from this
    process, inside `box`. Returns (first failing test, '' if every run passed, 'error: ...' if pytest
    could not run the tests, 'timeout'; seconds)."""
    result_file = box / "result.json"
    result_file.unlink(missing_ok=True)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)  # its own process group: a timeout also ends what the tests started
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            sys.dont_write_bytecode = True
            os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
            _child(box, args, runs, result_file)
        finally:
            os._exit(3)
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - t0 > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - t0
        time.sleep(0.05)
    killer = json.loads(result_file.read_text())["killer"] if result_file.exists() else "child crashed"
    return killer, time.monotonic() - t0


def baseline(make_box: Callable[[], Path], drop_box: Callable[[Path], None],
             run: Callable[[Path], tuple[str, float]], n_files: int) -> bool:
    """Run the tests on an unmutated sandbox (`run(box)` -> fork_pytest's answer); False, with one
    line on stderr, when they fail there: no mutant can be judged until they pass."""
    box = make_box()
    try:
        killer, secs = run(box)
    finally:
        drop_box(box)
    if killer:
        print(f"baseline fails ({killer}): fix the tests first", file=sys.stderr)
        return False
    print(f"baseline: the unmutated copy passes {n_files} test files ({secs:.0f} s)", flush=True)
    return True


def judge(m: Mutant, killer: str, seconds: float) -> None:
    """Record a mutant's outcome from fork_pytest's answer."""
    m.seconds = seconds
    if killer.startswith("error:"):  # the tests did not run: neither killed nor survived
        m.outcome, m.killer = "error", killer
    else:
        m.outcome, m.killer = ("killed", killer) if killer else ("survived", "")


def run_all(mutants: list[Mutant], workers: int, make_box: Callable[[], Path],
            run_one: Callable[[Path, Mutant], None], where: Callable[[Mutant], str],
            stop_at: float | None = None, drop_box: Callable[[Path], None] | None = None) -> list[Mutant]:
    """Run the mutants on `workers` forked workers, each with its own sandbox (`make_box()`, removed
    by `drop_box(box)`, default: the folder), one mutant at a time (`run_one(box, m)` sets its
    outcome); results in the mutants' order."""
    shares = [mutants[i::workers] for i in range(workers)]
    outdir = Path(tempfile.mkdtemp(prefix="dsv4-mutants-results-"))
    pids = []
    for w, share in enumerate(shares):
        pid = os.fork()
        if pid == 0:
            box = make_box()
            try:
                for m in share:
                    if stop_at is not None and time.monotonic() > stop_at:
                        m.outcome, m.killer = "not run", "budget spent"
                        continue
                    run_one(box, m)
                    mark = {"killed": ".", "survived": "S"}.get(m.outcome, "E")
                    print(f"{mark} {m.target}:{m.index} {where(m)} {m.what} ({m.seconds:.1f} s) {m.killer}",
                          flush=True)
                (outdir / f"{w}.json").write_text(json.dumps([m.__dict__ for m in share]))
            finally:
                (drop_box or (lambda b: shutil.rmtree(b, ignore_errors=True)))(box)
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    done = {}
    for w in range(workers):
        f = outdir / f"{w}.json"
        for d in (json.loads(f.read_text()) if f.exists() else []):
            done[(d["target"], d["index"])] = Mutant(**d)
    shutil.rmtree(outdir, ignore_errors=True)
    for m in mutants:
        if (m.target, m.index) not in done:
            m.outcome, m.killer = "error", "worker died"
    return [done.get((m.target, m.index), m) for m in mutants]


def report(mutants: list[Mutant], seconds: float, where: Callable[[Mutant], str]) -> None:
    """The score per target and overall (errors and mutants not run are not counted as killed), and
    every survivor with file:line and its mutation."""
    print()
    print(f"{'target':<20} {'mutants':>7} {'killed':>7} {'kill rate':>9}")
    for t in sorted({m.target for m in mutants}):
        ms = [m for m in mutants if m.target == t]
        k = sum(m.outcome == "killed" for m in ms)
        print(f"{t:<20} {len(ms):>7} {k:>7} {k / len(ms):>9.1%}")
    k = sum(m.outcome == "killed" for m in mutants)
    print(f"{'all':<20} {len(mutants):>7} {k:>7} {k / max(len(mutants), 1):>9.1%}   ({seconds:.0f} s)")
    for why in ("error", "not run"):
        n = sum(m.outcome == why for m in mutants)
        if n:
            print(f"\n{why}: {n} mutants (not counted as killed)")
    surv = [m for m in mutants if m.outcome == "survived"]
    print(f"\nsurvivors: {len(surv)}")
    for m in surv:
        print(f"  {m.target}:{m.index}  {where(m)}  {m.what}")
