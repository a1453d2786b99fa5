"""Mutation check of kernels/: apply one-line operator/constant mutations to a copy, run the kernel
tests against each mutant, print the kill rate and list the survivors.

Why a script of our own: the maintained tools do not fit this code. mutmut 3 runs mutants through
trampolines that wrap each function, which `@triton.jit` cannot compile (it parses the function's own
source); cosmic-ray rewrites files in place (fine for Triton) but pays a full interpreter start per
mutant (torch + triton imports, ~4 s here) and generates every operator for every operator site, which
multiplies the run by about six on a shared 2-core machine. This script mutates the AST of a copy,
writes the mutant as source (so `triton.jit` and the Triton interpreter see real source), and runs
pytest in a child forked from a parent that has already imported torch, numpy and pytest. Not triton:
triton.language makes its helpers (`tl.max`, ...) when it is imported, interpreted or not by
TRITON_INTERPRET at that moment, so a child that interprets a kernel in-process must import triton
itself, after setting the variable (with triton 3.9 a parent's import made every such child fail,
unmutated or not, and each mutant inside a kernel read "killed"; `in_process_probe` now checks the
unmutated copy first and runs the full tests instead where that fast run does not pass).

Not part of `.ci/run` (minutes, not seconds). Usage:

    python benchmarks/mutate_kernels.py                    # every target, CPU tests (not `gpu`)
    python benchmarks/mutate_kernels.py --target codecs    # one target (see TARGETS)
    python benchmarks/mutate_kernels.py --list             # the mutants, not run
    python benchmarks/mutate_kernels.py --json out.json    # also write every mutant's result

A mutant is killed when a test fails (or errors, or times out); the first failing test is its killer.
Survivors are listed with file:line and the mutation; docs/kernels/mutation-report.md says which of
them are equivalent and why.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _mutation  # noqa: E402  (shared with mutate_engine.py: sandbox runs, fork, score)
from _mutation import Mutant, Sites, fork_pytest, judge  # noqa: E402,F401  (Mutant: the tests use it)
from _mutation import op_text as _op  # noqa: E402
from _mutation import short as _short  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# target name -> (file, test files, tests to run first for mutants inside @triton.jit functions)
TARGETS: dict[str, tuple[str, list[str], str]] = {
    "codecs": ("kernels/codecs.py", ["tests/kernels/test_codecs.py", "tests/kernels/test_nvfp4.py",
                                     "tests/kernels/test_fp8_ds_mla.py"], ""),
    "qdq-oracle": ("kernels/o_fp8_qdq/naive.py", ["tests/kernels/test_o_fp8_qdq_kernel.py"], ""),
    "qdq-eager": ("kernels/o_fp8_qdq/torch_qdq.py", ["tests/kernels/test_o_fp8_qdq_kernel.py"], ""),
    "qdq-sglang": ("kernels/o_fp8_qdq/sglang_o_fp8_qdq.py", ["tests/kernels/test_o_fp8_qdq_kernel.py"],
                   "interpreter"),  # -k: the tests whose names say they run the interpreter
    "qdq-sglang-cpu": ("kernels/o_fp8_qdq/sglang_o_fp8_qdq_cpu.py", ["tests/kernels/test_o_fp8_qdq_kernel.py"], ""),
    "fp8_ds_mla": ("kernels/fp8_ds_mla/naive.py", ["tests/kernels/test_fp8_ds_mla.py",
                                                   "tests/kernels/test_e4m3_decode.py",
                                                   "tests/kernels/test_e4m3_writer_scale.py"], ""),
    "fp8_ds_mla-layout": ("kernels/fp8_ds_mla/layout.py", ["tests/kernels/test_fp8_ds_mla.py",
                                                          "tests/kernels/test_e4m3_decode.py"], ""),
    "e4m3-decode": ("kernels/e4m3_decode/triton_decode.py", ["tests/kernels/test_e4m3_decode.py"],
                    "interpreter"),
    "e4m3-decode-ref": ("kernels/e4m3_decode/naive.py", ["tests/kernels/test_e4m3_decode.py"], ""),
    "nvfp4": ("kernels/nvfp4/naive.py", ["tests/kernels/test_nvfp4.py"], ""),
}
# Functions left alone: a deliberately wrong reader kept so a test can show the oracle catches it, and
# nvfp4's TMEM coordinate helpers (layout arithmetic of the DeepGEMM patch, not a codec).
SKIP_FUNCTIONS = {"wrong_contiguous_reader", "tmem_4x_coords", "tmem_1x_num_cols", "tmem_4x_num_cols"}

BINOP_SWAP = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult],
              ast.FloorDiv: [ast.Mult], ast.Mod: [ast.FloorDiv], ast.Pow: [ast.Mult],
              ast.LShift: [ast.RShift], ast.RShift: [ast.LShift], ast.BitAnd: [ast.BitOr],
              ast.BitOr: [ast.BitAnd], ast.BitXor: [ast.BitOr]}
NAME_SWAP = {"maximum": "minimum", "minimum": "maximum", "max": "min", "min": "max", "floor": "ceil",
             "ceil": "floor", "clamp_min": "clamp_max", "amax": "amin"}
# Operator groups, for the report; every mutant's `what` starts with the words of one of them.
#   int64: drop an int64 cast (`x.to(tl.int64)`, `x.to(torch.int64)`, `.astype(np.int64)`,
#          `dtype=torch.int64` in a `.to(...)`): offsets and indices fall back to the input's width
#          (int32 in a Triton kernel), the 32-bit-offset bug of a kernel run on a big tensor.
#   libm:  swap an exact routine for the libm one: a function named `*ceil_log2*` becomes
#          ceil(log2(x)) in float32 (torch / numpy / tl, as the function uses), and inside a
#          @triton.jit function an exponent read from float32 bits (`(b >> 23) ... - 127`, with or
#          without the `+ (b & 0x7FFFFF != 0)` of a ceil) becomes floor / ceil of tl.log2 of the float.
#          Wrong only for a float32 within rounding of a power of two: what the edge tests must reach.
INT64_NAMES = {"int64"}
LIBM_CEIL_LOG2 = {
    "tl": "return tl.ceil(tl.log2({a})).to(tl.int32)",
    "np": "return np.ceil(np.log2(np.asarray({a}, dtype=np.float32))).astype(np.int64)",
    "torch": "return torch.ceil(torch.log2({a})).to(torch.int32)",
}


class _Sites(Sites):
    """The kernel operators, on top of the shared ones (_mutation.Sites: comparisons, and/or, `not`,
    a dropped raise guard): arithmetic swaps, int64 casts, libm, constants, max/min-style names."""

    def __init__(self, apply: int | None = None):
        super().__init__(apply)
        self._docstring_ids: set[int] = set()

    def visit_FunctionDef(self, node):
        jit = any("jit" in ast.unparse(d) for d in node.decorator_list)
        skip = node.name in SKIP_FUNCTIONS
        self._jit += jit
        self._skip += skip
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            self._docstring_ids.add(id(node.body[0].value))
        node.body = [self.visit(n) for n in node.body]
        node.decorator_list = [d for d in node.decorator_list]  # decorators are not mutated
        if "ceil_log2" in node.name.lower() and node.args.args:
            flavour = "tl" if self._jit else ("np" if "np." in ast.unparse(node) else "torch")
            repl = LIBM_CEIL_LOG2[flavour].format(a=node.args.args[0].arg)
            if self._site(node, f"libm: body of {node.name}() -> `{repl[7:]}`"):
                doc = node.body[:1] if node.body and isinstance(node.body[0], ast.Expr) else []
                node.body = doc + ast.parse(repl).body
        self._jit -= jit
        self._skip -= skip
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        for new in BINOP_SWAP.get(type(node.op), []):
            if self._site(node, f"{_op(node.op)} -> {_op(new())} in `{_short(node)}`"):
                node.op = new()
        if self._jit:
            libm = _bits_exponent_libm(node)
            if libm is not None and self._site(node, f"libm: `{_short(node)}` -> `{_short(libm)}`"):
                return ast.copy_location(libm, node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if not isinstance(f, ast.Attribute) or f.attr not in ("to", "astype"):
            return node
        if (len(node.args) == 1 and not node.keywords and _is_int64(node.args[0])):
            if self._site(node, f"int64: drop the cast in `{_short(node)}`"):
                return f.value
        for i, kw in enumerate(node.keywords):
            if kw.arg == "dtype" and _is_int64(kw.value) and self._site(
                    node, f"int64: drop `dtype=...int64` in `{_short(node)}`"):
                node.keywords = node.keywords[:i] + node.keywords[i + 1:]
                if not node.args and not node.keywords:
                    return f.value
                return node
        return node

    def visit_Constant(self, node):
        v = node.value
        if id(node) in self._docstring_ids or isinstance(v, bool) or not isinstance(v, (int, float)):
            return node
        if isinstance(v, int):  # one step up: an off-by-one in either direction dies the same way
            if self._site(node, f"constant {v} -> {v + 1}"):
                return ast.copy_location(ast.Constant(v + 1), node)
        else:
            new = v * 2 if v else 1.0
            if self._site(node, f"constant {v!r} -> {new!r}"):
                return ast.copy_location(ast.Constant(new), node)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        new = NAME_SWAP.get(node.attr)
        if new and self._site(node, f".{node.attr} -> .{new}"):
            node.attr = new
        return node

    def visit_Name(self, node):
        new = NAME_SWAP.get(node.id) if node.id in ("max", "min") else None
        if new and isinstance(node.ctx, ast.Load) and self._site(node, f"{node.id}() -> {new}()"):
            node.id = new
        return node


def _is_int64(node) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr in INT64_NAMES)
            or (isinstance(node, ast.Name) and node.id in INT64_NAMES))


def _shift23_operand(node) -> str | None:
    """The name b of the `b >> 23` inside node (an exponent read from float32 bits), else None."""
    for n in ast.walk(node):
        if (isinstance(n, ast.BinOp) and isinstance(n.op, ast.RShift) and isinstance(n.right, ast.Constant)
                and n.right.value == 23 and isinstance(n.left, ast.Name)):
            return n.left.id
    return None


def _bits_exponent_libm(node):
    """For `E - 127` (E holding `b >> 23`: floor(log2) of the float32 with bits b) and for
    `E - 127 + M` (M holding `b & 0x7FFFFF`: the +1 of a ceil), the tl.log2 expression that computes
    the same in float32 arithmetic; None for anything else."""
    if isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Constant) and node.right.value == 127:
        b, fn = _shift23_operand(node.left), "floor"
    elif (isinstance(node.op, ast.Add) and isinstance(node.left, ast.BinOp)
          and isinstance(node.left.op, ast.Sub) and isinstance(node.left.right, ast.Constant)
          and node.left.right.value == 127):
        b, fn = _shift23_operand(node.left.left), "ceil"
        mant = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitAnd) and isinstance(n.right, ast.Constant)
                   and n.right.value == 0x7FFFFF for n in ast.walk(node.right))
        if not mant:
            return None
    else:
        return None
    if b is None:
        return None
    return ast.parse(f"tl.{fn}(tl.log2({b}.to(tl.float32, bitcast=True))).to(tl.int32)", mode="eval").body


def source_sites(source: str) -> list[tuple[int, str, bool]]:
    """(line, mutation, inside @triton.jit) of every mutation site of a module's source."""
    return _mutation.source_sites(_Sites, source)


def mutate_source(source: str, index: int) -> str:
    """The source with its index-th mutation applied (as ast.unparse writes it)."""
    return _mutation.mutate_source(_Sites, source, index)


def enumerate_mutants(target: str) -> list[Mutant]:
    return _mutation.enumerate_mutants(_Sites, target, ROOT / TARGETS[target][0])


def mutant_source(target: str, index: int) -> str:
    return mutate_source((ROOT / TARGETS[target][0]).read_text(), index)


def make_sandbox(targets: list[str]) -> Path:
    """A copy of what the kernel tests need (kernels/, tests/kernels/, tests/conftest.py, the pytest
    configuration); mutants are written into it, never into the repository. The target files are
    written as ast.unparse gives them (the same rewrite as every mutant, minus the mutation), so the
    baseline run checks that the rewrite alone changes nothing."""
    box = Path(tempfile.mkdtemp(prefix="dsv4-mutants-"))
    shutil.copytree(ROOT / "kernels", box / "kernels", ignore=shutil.ignore_patterns("__pycache__", "results"))
    (box / "tests").mkdir()
    shutil.copytree(ROOT / "tests" / "kernels", box / "tests" / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for helper in (ROOT / "tests").glob("*.py"):  # conftest.py and the modules it imports
        shutil.copy(helper, box / "tests" / helper.name)
    (box / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nmarkers =\n    gpu: gpu\n"
                                    "    network: network\n    slow: slow\n    sm100: sm100\n")
    for t in targets:
        rel = TARGETS[t][0]
        (box / rel).write_text(ast.unparse(ast.parse((ROOT / rel).read_text())) + "\n")
    return box


def _where(m: Mutant) -> str:
    return f"{TARGETS[m.target][0]}:{m.line}"


def _pytest_args(tests: list[str], marker: str, box: Path) -> list[str]:
    return ["-x", "-q", "--no-header", "-p", "no:randomly", "-m", marker, "-c", str(box / "pytest.ini"),
            "--rootdir", str(box), *tests]


def _in_process(first_k: str) -> _mutation.Run:
    # the interpreter tests alone, in the forked child (they interpret in-process when
    # TRITON_INTERPRET=1 is already set: no fresh interpreter to start)
    return (["-k", first_k], {"TRITON_INTERPRET": "1"})


FULL: _mutation.Run = ([], {"TRITON_INTERPRET": None})  # every test, in the ordinary environment


# Targets whose in-process interpreter run fails on the unmutated copy (in_process_probe): their
# mutants go straight to the full tests, whose fixtures start interpreters of their own.
NO_IN_PROCESS: set[str] = set()


def in_process_probe(targets: list[str], marker: str, timeout: float) -> None:
    """Run each target's in-process interpreter tests on the unmutated copy; where they do not pass,
    that fast run would "kill" every mutant inside a kernel without testing it: skip it there."""
    for t in targets:
        rel, tests, first_k = TARGETS[t]
        if not first_k:
            continue
        box = make_sandbox([t])
        try:
            killer, _ = fork_pytest(box, _pytest_args(tests, marker, box), [_in_process(first_k)], timeout)
        finally:
            shutil.rmtree(box, ignore_errors=True)
        if killer:
            NO_IN_PROCESS.add(t)
            print(f"{t}: the in-process interpreter run fails on the unmutated copy ({killer}): "
                  "its kernel mutants run the full tests instead", flush=True)


def run_all(mutants: list[Mutant], workers: int, marker: str, timeout: float,
            stop_at: float | None = None) -> list[Mutant]:
    """Run the mutants on `workers` forked workers, each with its own sandbox; results in order."""
    targets = sorted({m.target for m in mutants})
    return _mutation.run_all(mutants, workers, lambda: make_sandbox(targets),
                             lambda box, m: run_mutant(box, m, marker, timeout), _where, stop_at)


def _fork_pytest(box: Path, tests: list[str], first_k: str, marker: str, timeout: float) -> tuple[str, float]:
    """Run pytest in forked children; returns (first failing test or '' if all passed, seconds).
    With `first_k`, the in-process interpreter tests run first, and only if they pass the full tests,
    each in a child of its own: a child that has imported triton interpreted keeps it so, and the
    full run after it in the same process failed tests the mutant does not touch."""
    args = _pytest_args(tests, marker, box)
    if not first_k:
        return fork_pytest(box, args, [FULL], timeout)
    killer, secs = fork_pytest(box, args, [_in_process(first_k)], timeout)
    if killer:
        return killer, secs
    if timeout - secs <= 0:
        return "timeout", secs
    killer, more = fork_pytest(box, args, [FULL], timeout - secs)
    return killer, secs + more


def run_mutant(box: Path, m: Mutant, marker: str, timeout: float) -> None:
    rel, tests, first_k = TARGETS[m.target]
    dest = box / rel
    original = dest.read_text()
    dest.write_text(mutant_source(m.target, m.index))
    try:
        fast = first_k if m.in_jit and m.target not in NO_IN_PROCESS else ""
        killer, secs = _fork_pytest(box, tests, fast, marker, timeout)
    finally:
        dest.write_text(original)
    judge(m, killer, secs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: all")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--marker", default="not gpu", help="pytest -m expression (default: 'not gpu')")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant")
    ap.add_argument("--only", help="comma-separated mutant ids (target:index) to run")
    ap.add_argument("--json", type=Path, help="write every mutant's result here")
    ap.add_argument("--workers", type=int, default=1, help="mutants run in parallel (default 1)")
    ap.add_argument("--skip-baseline", action="store_true",
                    help="do not first run the unmutated copy's tests (when that was checked on this tree already); "
                         "the in-process interpreter probe still runs")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: start no new mutant after this (the rest are reported as not run)")
    a = ap.parse_args()

    mutants = [m for t in (a.target or list(TARGETS)) for m in enumerate_mutants(t)]
    if a.only:
        keep = set(a.only.split(","))
        mutants = [m for m in mutants if f"{m.target}:{m.index}" in keep]
    if a.list:
        for m in mutants:
            print(f"{m.target}:{m.index}\t{TARGETS[m.target][0]}:{m.line}\t{m.what}")
        print(f"{len(mutants)} mutants")
        return 0

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy  # noqa: F401  (imported once here; every forked child reuses them)
    import pytest  # noqa: F401
    import torch

    torch.set_num_threads(1)
    import hypothesis  # noqa: F401  (not triton: see the module docstring)

    targets = sorted({m.target for m in mutants})
    all_tests = sorted({f for t in targets for f in TARGETS[t][1]})
    if not a.skip_baseline and not _mutation.baseline(
            lambda: make_sandbox(targets), lambda box: shutil.rmtree(box, ignore_errors=True),
            lambda box: _fork_pytest(box, all_tests, "", a.marker, a.timeout * 4), len(all_tests)):
        return 1
    # before the workers fork: they inherit NO_IN_PROCESS
    in_process_probe(sorted({m.target for m in mutants if m.in_jit}), a.marker, a.timeout)
    print(f"{len(mutants)} mutants on {a.workers} worker(s)", flush=True)
    t0 = time.monotonic()
    mutants = run_all(mutants, a.workers, a.marker, a.timeout, t0 + a.budget if a.budget else None)
    dt = time.monotonic() - t0

    report(mutants, dt)
    if a.json:
        a.json.write_text(json.dumps([m.__dict__ for m in mutants], indent=1))
    return 0


def report(mutants: list[Mutant], seconds: float) -> None:
    _mutation.report(mutants, seconds, _where)


if __name__ == "__main__":
    sys.exit(main())
