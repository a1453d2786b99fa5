"""Mutation check of the engine's decision modules (dsv4_patch/): apply one-line mutations to a copy,
run the fast engine and bump tests that cover each module, print the score and list the survivors.

The machinery is benchmarks/_mutation.py, shared with mutate_kernels.py: the mutant is made on the
AST of a copy and written as source into a sandbox (the repository is never touched), and pytest runs
in a child forked from a parent that has already imported pytest, typer, rich and hypothesis (never
dsv4_patch: each child imports the sandbox's, mutated, package). The operators are the engine's kind
of mistake, the ones that make a wrong decision rather than a wrong number:

    comparison flips (< <=, == !=, in / not in, is / is not), and <-> or, dropping a `not`,
    True <-> False, `return X` -> `return None`, off-by-one on a constant index or a slice bound,
    dropping a guard that raises, dropping an early exit (`if c: return/continue/break`), and
    dropping any other `if`'s condition (its body always runs).

Every target has more sites than a 2-core machine can run, so a run takes a seeded sample, spread over
the targets by their number of sites (at least --min-per-target each). The seed is printed; pass it
back with --seed to run the same mutants. Not part of `.ci/run` (tens of minutes). Usage:

    python benchmarks/mutate_engine.py --seed 29 --sample 90      # the report's run
    python benchmarks/mutate_engine.py --target classify --list    # every mutant of a target, not run
    python benchmarks/mutate_engine.py --only classify:12,tree:40  # these mutants (no sampling)
    python benchmarks/mutate_engine.py --json out.json             # also write every mutant's result

A mutant is killed when a test fails (or errors, or times out); a pytest usage or internal error is an
error, not a kill. docs/engine-mutation-report.md argues every survivor of the report's run.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _mutation  # noqa: E402
from _mutation import Mutant, Sites, fork_pytest, judge, short  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

E, B, N = "tests/engine/", "tests/bump/", "tests/newcomer/"
# target name -> (module, the fast test files that cover it, cheapest first: each runs in seconds to
# tens of seconds on synthetic upstreams, no PyPI, no venv). pincheck and compilecheck are tested
# where their issue put them, in two synthetic tests/newcomer files (not the newcomer session).
TARGETS: dict[str, tuple[str, list[str]]] = {
    "classify": ("dsv4_patch/bump/classify.py",
                 [B + "test_bump_mutants_killed.py", B + "test_engine_decisions.py", B + "test_classify_index.py",
                  B + "test_bump.py"]),
    "semantic": ("dsv4_patch/bump/semantic.py",
                 [B + "test_engine_decisions.py", B + "test_semantic.py", B + "test_bump_child_lock_env.py",
                  B + "test_pristine_evidence.py"]),  # run_on_pristine: regress --record's pristine run
    "evidence": ("dsv4_patch/bump/evidence.py",
                 [B + "test_bump_mutants_killed.py", B + "test_engine_decisions.py",
                  B + "test_no_green_without_evidence.py"]),
    "resolve": ("dsv4_patch/resolve.py",
                [E + "test_engine_mutants_killed.py", E + "test_issue28_bump_resolutions.py",
                 E + "test_safety_newpaths.py", N + "test_apply_conflict_workflow.py"]),
    "tree": ("dsv4_patch/tree.py",
             [E + "test_engine_mutants_killed.py", E + "test_path_safety_git_aliases.py", E + "test_lint.py",
              E + "test_apply.py", E + "test_safety_localwork.py", E + "test_safety_newpaths.py"]),
    "patchfile": ("dsv4_patch/patchfile.py",
                  [E + "test_engine_mutants_killed.py", E + "test_path_safety_git_aliases.py", E + "test_lint.py",
                   E + "test_safety_binary.py", E + "test_apply.py", E + "test_safety_fuzz.py"]),
    "fastapply": ("dsv4_patch/fastapply.py",
                  [E + "test_engine_mutants_killed.py", E + "test_fastpath_corners.py",
                   E + "test_incremental_fastpath.py"]),
    "series": ("dsv4_patch/series.py", [E + "test_apply.py", E + "test_empty_series.py"]),
    "pincheck": ("dsv4_patch/pincheck.py", [N + "test_pin_check.py"]),
    "compilecheck": ("dsv4_patch/compilecheck.py", [E + "test_engine_mutants_killed.py", N + "test_compile_check.py"]),
}


class EngineSites(Sites):
    """The engine operators on top of _mutation.Sites (comparisons, and/or, `not`, raise guards)."""

    cmp_swap = {**Sites.cmp_swap, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}

    def visit_FunctionDef(self, node):
        node.body = [self.visit(n) for n in node.body]  # not the decorators, defaults or annotations
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_JoinedStr(self, node):
        return node  # an f-string is a message

    def visit_Constant(self, node):
        if isinstance(node.value, bool) and self._site(node, f"constant {node.value} -> {not node.value}"):
            return ast.copy_location(ast.Constant(not node.value), node)
        return node

    def visit_Return(self, node):
        self.generic_visit(node)
        v = node.value
        if v is not None and not isinstance(v, ast.Constant) and self._site(
                node, f"`return {short(v)}` -> `return None`"):
            node.value = None
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        s = node.slice
        if isinstance(s, ast.Slice):
            for bound in ("lower", "upper"):
                b = getattr(s, bound)
                if b is not None and self._site(node, f"{bound} bound + 1 in `{short(node)}`"):
                    setattr(s, bound, ast.BinOp(b, ast.Add(), ast.Constant(1)))
        else:
            try:
                i = ast.literal_eval(s)
            except ValueError:
                i = None
            if type(i) is int and self._site(node, f"index {i} -> {i + 1} in `{short(node)}`"):
                node.slice = ast.copy_location(ast.Constant(i + 1), s)
        return node

    def visit_If(self, node):
        body_raises = any(isinstance(n, ast.Raise) for n in node.body)
        exits = not body_raises and any(isinstance(n, (ast.Return, ast.Continue, ast.Break)) for n in node.body)
        node.test = self.visit(node.test)
        if body_raises and self._site(node, f"drop the check `if {short(node.test)}: raise ...`"):
            node.test = ast.copy_location(ast.Constant(False), node.test)
        elif exits and self._site(node, f"drop the early exit `if {short(node.test)}: ...`"):
            node.test = ast.copy_location(ast.Constant(False), node.test)
        elif not body_raises and not exits and self._site(node, f"drop the condition `if {short(node.test)}:` "
                                                                f"(always taken)"):
            node.test = ast.copy_location(ast.Constant(True), node.test)
        node.body = [self.visit(n) for n in node.body]
        node.orelse = [self.visit(n) for n in node.orelse]
        return node


source_sites = functools.partial(_mutation.source_sites, EngineSites)  # (source) -> [(line, what, _)]
mutate_source = functools.partial(_mutation.mutate_source, EngineSites)  # (source, index) -> source


def enumerate_mutants(target: str) -> list[Mutant]:
    return _mutation.enumerate_mutants(EngineSites, target, ROOT / TARGETS[target][0])


def sample(mutants: list[Mutant], n: int, seed: int, min_per_target: int) -> list[Mutant]:
    """n mutants (about), drawn per target in proportion to its sites, at least min_per_target each;
    the same seed and tree give the same mutants."""
    by: dict[str, list[Mutant]] = {}
    for m in mutants:
        by.setdefault(m.target, []).append(m)
    total = max(len(mutants), 1)
    out = []
    for t in sorted(by):
        ms = by[t]
        k = min(len(ms), max(min_per_target, round(n * len(ms) / total)))
        out += sorted(random.Random(f"{seed}:{t}").sample(ms, k), key=lambda m: m.index)
    return out


def _where(m: Mutant) -> str:
    return f"{TARGETS[m.target][0]}:{m.line}"


def make_sandbox(targets: list[str]) -> Path:
    """A copy of the package, tools/ and the engine, bump and newcomer tests (with the helpers and conftest of
    tests/); every other top-level entry (docs, patches, the venv) is a link to the repository, build/
    and .git are left out. Target files are written as ast.unparse gives them, as every mutant is, so
    the baseline run checks that the rewrite alone changes nothing."""
    shm = Path("/dev/shm")  # memory: the tests make and delete many small git repositories
    top = Path(tempfile.mkdtemp(prefix="dsv4-engine-mutants-",
                                dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None))
    # the copy in top/repo, scratch and caches in top/scratch: never below the copy, whose
    # pyproject.toml would become the rootdir of the pytest runs the engine starts in a test project
    box = top / "repo"
    (top / "scratch").mkdir()
    ign = shutil.ignore_patterns("__pycache__")
    for d in ("dsv4_patch", "tools", "tests/engine", "tests/bump", "tests/newcomer"):
        shutil.copytree(ROOT / d, box / d, ignore=ign)
    for helper in (ROOT / "tests").glob("*.py"):
        shutil.copy(helper, box / "tests" / helper.name)
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "build", "dsv4_patch", "tools", "tests", "__pycache__") \
                and not (box / entry.name).exists():
            (box / entry.name).symlink_to(entry)
    for t in targets:
        rel = TARGETS[t][0]
        (box / rel).write_text(ast.unparse(ast.parse((ROOT / rel).read_text())) + "\n")
    return box


def drop_sandbox(box: Path) -> None:
    shutil.rmtree(box.parent, ignore_errors=True)


def _args(box: Path, tests: list[str]) -> list[str]:
    return ["-x", "-q", "--no-header", "-p", "no:randomly", "-p", "no:cacheprovider",
            "-m", "not slow and not network and not gpu", "--basetemp", str(box.parent / "scratch" / "t"),
            "--rootdir", str(box), "-c", str(box / "pyproject.toml"), *tests]


def _env(box: Path) -> dict[str, str | None]:
    # serial pytest; every cache the engine or the tests keep lives in the sandbox: a mutant must not
    # leave anything behind in the user's cache that a later run (or mutant) would read
    scratch = box.parent / "scratch"
    return {"DSV4_TEST_WORKERS": "0", "DSV4_PATCH_CACHE": str(scratch / "cache"), "TMPDIR": str(scratch)}


def run_mutant(box: Path, m: Mutant, timeout: float) -> None:
    rel, tests = TARGETS[m.target]
    dest = box / rel
    original = dest.read_text()
    dest.write_text(mutate_source((ROOT / rel).read_text(), m.index))
    try:
        killer, secs = fork_pytest(box, _args(box, tests), [([], _env(box))], timeout)
    finally:
        dest.write_text(original)
    judge(m, killer, secs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: all")
    ap.add_argument("--list", action="store_true", help="list the mutants (after sampling) and exit")
    ap.add_argument("--seed", type=int, help="sample seed (default: drawn, and printed)")
    ap.add_argument("--sample", type=int, default=90, help="about this many mutants (0: all)")
    ap.add_argument("--min-per-target", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant (a timeout is a kill)")
    ap.add_argument("--only", help="comma-separated mutant ids (target:index) to run; no sampling")
    ap.add_argument("--json", type=Path, help="write every mutant's result here")
    ap.add_argument("--workers", type=int, default=1, help="mutants run in parallel (default 1)")
    ap.add_argument("--skip-baseline", action="store_true", help="do not first run the unmutated copy")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: start no new mutant after this (the rest are reported as not run)")
    a = ap.parse_args(argv)

    targets = a.target or list(TARGETS)
    mutants = [m for t in targets for m in enumerate_mutants(t)]
    if a.only:
        keep = set(a.only.split(","))
        mutants = [m for m in mutants if f"{m.target}:{m.index}" in keep]
    elif a.sample:
        seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
        total = len(mutants)
        mutants = sample(mutants, a.sample, seed, a.min_per_target)
        print(f"seed {seed}: {len(mutants)} of {total} mutants (--seed {seed} --sample {a.sample} "
              f"--min-per-target {a.min_per_target} draws them again)", flush=True)
    if a.list:
        for m in mutants:
            print(f"{m.target}:{m.index}\t{_where(m)}\t{m.what}")
        print(f"{len(mutants)} mutants")
        return 0

    import hypothesis  # noqa: F401  (imported once here; every forked child reuses them)
    import pytest  # noqa: F401
    import rich.console  # noqa: F401
    import typer  # noqa: F401

    used = sorted({m.target for m in mutants})
    tests = sorted({f for t in used for f in TARGETS[t][1]})
    if not a.skip_baseline and not _mutation.baseline(
            lambda: make_sandbox(used), drop_sandbox,
            lambda box: fork_pytest(box, _args(box, tests), [([], _env(box))], a.timeout * 6), len(tests)):
        return 1
    print(f"{len(mutants)} mutants on {a.workers} worker(s)", flush=True)
    t0 = time.monotonic()
    mutants = _mutation.run_all(mutants, a.workers, lambda: make_sandbox(used),
                                lambda box, m: run_mutant(box, m, a.timeout), _where,
                                t0 + a.budget if a.budget else None, drop_sandbox)
    dt = time.monotonic() - t0
    _mutation.report(mutants, dt, _where)
    if a.json:
        a.json.write_text(json.dumps([m.__dict__ for m in mutants], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
