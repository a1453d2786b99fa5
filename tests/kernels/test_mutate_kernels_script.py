"""benchmarks/mutate_kernels.py (not run in CI, minutes long): its mutant generation stays sound.

Only what is cheap: every target has mutation sites; each mutant's source parses and differs from the
baseline rewrite in exactly the mutated spot; functions left out are left out; and how a mutant
inside a kernel is run (planted test files, forked pytest runs of a second each): the in-process
interpreter run and the full run in children of their own, and no in-process run where it fails on
the unmutated copy."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mk():
    spec = importlib.util.spec_from_file_location("mutate_kernels", ROOT / "benchmarks" / "mutate_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutate_kernels", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_target_has_mutants_and_each_is_one_change(mk):
    for target, (rel, tests, _) in mk.TARGETS.items():
        mutants = mk.enumerate_mutants(target)
        if rel.endswith("e4m3_decode/naive.py"):
            assert mutants == []  # one call, nothing to mutate
            continue
        assert len(mutants) > 10, target
        assert all((ROOT / t).is_file() for t in tests)
        base = ast.dump(ast.parse(ast.unparse(ast.parse((ROOT / rel).read_text()))))
        for m in mutants[:: max(1, len(mutants) // 7)]:
            src = mk.mutant_source(target, m.index)
            assert ast.dump(ast.parse(src)) != base, (target, m.index, m.what)


def test_skipped_functions_have_no_mutants(mk):
    lines = (ROOT / "kernels/fp8_ds_mla/naive.py").read_text().splitlines()
    start = next(i for i, l in enumerate(lines, 1) if l.startswith("def wrong_contiguous_reader"))
    assert not [m for m in mk.enumerate_mutants("fp8_ds_mla") if m.line >= start]
    assert {m.in_jit for m in mk.enumerate_mutants("qdq-sglang")} == {True, False}


PLANTED = '''
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def kernel(o_ptr, stride_t, G):
    row = tl.program_id(0)
    t = row // G
    base = t.to(tl.int64) * stride_t
    rb = tl.load(o_ptr + base).to(tl.uint32, bitcast=True)
    e = ((rb >> 23) & 0xFF).to(tl.int32) - 127 + ((rb & 0x7FFFFF) != 0).to(tl.int32)
    tl.store(o_ptr + base, e)


def _ceil_log2(s):
    mantissa, exponent = torch.frexp(s)
    return torch.where(mantissa == 0.5, exponent - 1, exponent)


def ceil_log2_bits(r):
    bits = np.asarray(r, dtype=np.float32).view(np.uint32)
    return ((bits >> 23) & 0xFF).astype(np.int64) - 127 + ((bits & 0x7FFFFF) != 0)


def index(slots, dev):
    return slots.to(torch.int64), slots.to(device=dev, dtype=torch.int64), slots.to(dev)
'''


def _mutants(mk, prefix):
    """{mutation text: mutated source} of the planted source, for the operator `prefix`."""
    return {what: mk.mutate_source(PLANTED, i)
            for i, (_, what, _) in enumerate(mk.source_sites(PLANTED)) if what.startswith(prefix)}


def _norm(src):
    return ast.unparse(ast.parse(src))


def test_int64_operator_drops_each_int64_cast_and_nothing_else(mk):
    got = _mutants(mk, "int64:")
    assert len(got) == 4, list(got)  # t.to(tl.int64), slots.to(torch.int64), dtype=..., .astype(np.int64)
    base = _norm(PLANTED)
    expect = [("t.to(tl.int64) * stride_t", "t * stride_t"),  # in source order
              ("(bits >> 23 & 255).astype(np.int64)", "(bits >> 23 & 255)"),
              ("return (slots.to(torch.int64),", "return (slots,"),
              ("slots.to(device=dev, dtype=torch.int64)", "slots.to(device=dev)")]
    for (old, new), src in zip(expect, got.values()):
        assert old in base and _norm(src) == base.replace(old, new, 1), (old, new)
    # a cast to another type (bitcast to uint32, .to(dev)) is not an int64 cast
    assert not any("uint32" in w or "to(dev)`" in w for w in got)


def test_libm_operator_swaps_exact_exponent_routines(mk):
    got = _mutants(mk, "libm:")
    base = _norm(PLANTED)
    srcs = [_norm(s) for s in got.values()]
    # inside the kernel: the ceil from the bits, and its floor part on its own
    ceil_k = "e = tl.ceil(tl.log2(rb.to(tl.float32, bitcast=True))).to(tl.int32)"
    floor_k = ("e = tl.floor(tl.log2(rb.to(tl.float32, bitcast=True))).to(tl.int32) + "
               "(rb & 8388607 != 0).to(tl.int32)")
    assert any(ceil_k in s for s in srcs) and any(floor_k in s for s in srcs)
    # functions named *ceil_log2*: torch flavour and numpy flavour
    assert any("return torch.ceil(torch.log2(s)).to(torch.int32)" in s and "frexp" not in s for s in srcs)
    assert any("return np.ceil(np.log2(np.asarray(r, dtype=np.float32))).astype(np.int64)" in s
               and "bits >> 23" not in s for s in srcs)
    assert len(got) == 4, list(got)
    for s in srcs:  # each mutant is one change: the rest of the module is the baseline
        assert s != base and "def index(slots, dev)" in s
    # the kernel's floor mutant is made only inside @triton.jit: outside, the function rule applies
    assert sum("tl.log2" in w for w in got) == 2


def test_new_operators_reach_the_kernels(mk):
    """The sites issue 27 names: the QDQ kernel's 64-bit row offsets and its exponent from the fp32
    bits, the eager paths' and oracles' ceil_log2, the gather's slot index."""
    whats = {t: [m.what for m in mk.enumerate_mutants(t)] for t in mk.TARGETS}
    assert "int64: drop the cast in `t.to(tl.int64)`" in whats["qdq-sglang"]
    assert "int64: drop the cast in `g.to(tl.int64)`" in whats["qdq-sglang"]
    assert sum(w.startswith("libm:") for w in whats["qdq-sglang"]) == 3  # the kernel's exponents
    for t in ("qdq-eager", "qdq-oracle", "qdq-sglang-cpu", "fp8_ds_mla"):
        assert sum(w.startswith("libm: body of") for w in whats[t]) == 1, t
    assert any(w.startswith("int64:") and "program_id" in w for w in whats["e4m3-decode"])


def test_sandbox_has_what_the_tests_import(mk):
    """tests/conftest.py imports helper modules next to it (tests/_check_cache.py): the sandbox copies
    every tests/*.py, or every mutant 'dies' of a conftest ImportError (pytest exit 4), which the
    script reports as an error, not a kill."""
    import shutil

    box = mk.make_sandbox([])
    try:
        for f in (ROOT / "tests").glob("*.py"):
            assert (box / "tests" / f.name).is_file(), f.name
    finally:
        shutil.rmtree(box, ignore_errors=True)


def _planted_box(tmp_path: Path, interpreter_test: str) -> Path:
    """A sandbox as make_sandbox makes one, holding one test file: `interpreter_test` (tests whose names
    say `interpreter`) and a test of the full run that leaves a mark and checks its process is fresh."""
    box = tmp_path / "box"
    (box / "tests").mkdir(parents=True)
    (box / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nmarkers =\n    gpu: gpu\n")
    (box / "tests" / "test_planted.py").write_text(interpreter_test + '''

def test_full_run_sees_a_fresh_process():
    import os, sys
    from pathlib import Path
    Path("ran-full").write_text("")
    assert "planted_interpreted" not in sys.modules, "the interpreter run left its state here"
''')
    return box


def test_a_kernel_mutants_full_run_is_a_child_of_its_own(mk, tmp_path):
    """A mutant inside a kernel runs the in-process interpreter tests first, then (they passed) the
    full tests in another forked child: in one process, what the interpreter run imported (triton,
    interpreted) stays, and the full run failed tests the mutant does not touch (two survivors of
    the report, qdq-sglang:13 and :65, read "killed" so). Both runs leave their mark."""
    box = _planted_box(tmp_path, '''
import os, sys, types
from pathlib import Path

def test_interpreter_leaves_state():
    if os.environ.get("TRITON_INTERPRET") == "1":  # in-process, as the kernel tests interpret then
        Path("ran-interpreter").write_text("")
        sys.modules["planted_interpreted"] = types.ModuleType("planted_interpreted")
''')
    killer, _ = mk._fork_pytest(box, ["tests/test_planted.py"], "interpreter", "not gpu", 120)
    assert killer == "", killer
    assert (box / "ran-interpreter").is_file() and (box / "ran-full").is_file()


def test_a_failing_interpreter_run_is_the_verdict_and_no_full_run_follows(mk, tmp_path):
    box = _planted_box(tmp_path, "def test_interpreter_x():\n    raise AssertionError('the mutant')\n")
    killer, _ = mk._fork_pytest(box, ["tests/test_planted.py"], "interpreter", "not gpu", 120)
    assert killer == "tests/test_planted.py::test_interpreter_x"
    assert not (box / "ran-full").exists()


def test_an_in_process_run_that_fails_unmutated_is_not_used(mk, tmp_path, monkeypatch, capsys):
    """in_process_probe: where the interpreter tests fail on the unmutated copy (with triton 3.9 a
    parent that had imported triton made every such run fail), their kernel mutants go straight to
    the full tests instead of reading "killed" (run_mutant asks for no in-process run); where they
    pass, the fast run is kept."""
    for name, body, used in (("broken", "def test_interpreter_x():\n    raise RuntimeError('cannot interpret')\n", False),
                             ("sound", "def test_interpreter_x():\n    pass\n", True)):
        box = _planted_box(tmp_path / name, body)
        monkeypatch.setitem(mk.TARGETS, name, ("tests/test_planted.py", ["tests/test_planted.py"], "interpreter"))
        monkeypatch.setattr(mk, "make_sandbox", lambda targets, box=box, name=name: _copy(box, tmp_path / f"{name}-copy"))
        monkeypatch.setattr(mk, "NO_IN_PROCESS", set())
        mk.in_process_probe([name], "not gpu", 120)
        assert (name not in mk.NO_IN_PROCESS) is used
        assert ("fails on the unmutated copy" in capsys.readouterr().out) is not used
        asked = []
        monkeypatch.setattr(mk, "_fork_pytest", lambda box, tests, first_k, marker, timeout: asked.append(first_k) or ("", 0.0))
        monkeypatch.setattr(mk, "mutant_source", lambda target, index: "# the mutant\n")
        monkeypatch.setattr(mk, "judge", lambda m, killer, secs: None)
        mutant = mk.Mutant(name, 0, 1, "constant 1 -> 2", in_jit=True)
        mk.run_mutant(box, mutant, "not gpu", 120)
        assert asked == (["interpreter"] if used else [""])
        assert (box / "tests" / "test_planted.py").read_text() != "# the mutant\n"  # put back


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst
