"""vllm 5 on a CUDA GPU (level `gpu`; run on the lent H200): the patched tree's integer e4m3 encode
against the GPU's own float32 -> e4m3 conversion, and the patch's in-tree test file run as written.

- Every one of the 2^32 float32 bit patterns: the integer encode gives the hardware conversion's byte
  (NaN inputs: both give a NaN code). Counted per range (|x| <= 448, beyond 448 and infinities).
- tests/kernels/attention/test_dsv4_e4m3_manual_encode.py and
  tests/kernels/test_fused_deepseek_v4_e4m3_manual_encode.py from the patched tree, with the writer
  modules loaded through _standalone_dsv4_writers (no vLLM install needed): the encoder on the
  hard-coded edge codes and against torch on the CPU, every writer (K cache writer, indexer query
  quantizer, single- and two-stage compressors) with the integer encode against the same writer
  with the conversion, bit for bit. None of it may be skipped.

Run: dsv4-patch regress vllm -m gpu --record gpu --hardware H200"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _cuda_torch import cuda_torch

torch, NO_GPU = cuda_torch()  # still collected without a GPU (regress names these ids), then skipped
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason=NO_GPU or "")]

HERE = Path(__file__).resolve().parent
IN_TREE = ("tests/kernels/attention/test_dsv4_e4m3_manual_encode.py",  # the encoder
           "tests/kernels/test_fused_deepseek_v4_e4m3_manual_encode.py")  # the writers


@pytest.fixture(scope="module")
def writers(vllm_trees):
    import _standalone_dsv4_writers

    mods = _standalone_dsv4_writers.install(vllm_trees[0])
    yield mods
    _standalone_dsv4_writers.uninstall()


def _exhaustive_kernel():
    from vllm.triton_utils import tl, triton
    from vllm.v1.attention.ops.common import fp32_to_e4m3fn_manual

    @triton.jit
    def kernel(counts_ptr, start, BLOCK: tl.constexpr):
        offs = start + tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        x = offs.to(tl.uint32).to(tl.float32, bitcast=True)
        manual = fp32_to_e4m3fn_manual(x).to(tl.int32)
        hw = x.to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32)
        is_nan = x != x
        big = tl.abs(x) > 448.0
        nan_bad = is_nan & (((manual & 0x7F) != 0x7F) | ((hw & 0x7F) != 0x7F))
        bad = (~is_nan) & (manual != hw)
        tl.atomic_add(counts_ptr + 0, tl.sum((bad & ~big).to(tl.int32)))
        tl.atomic_add(counts_ptr + 1, tl.sum((bad & big).to(tl.int32)))
        tl.atomic_add(counts_ptr + 2, tl.sum(nan_bad.to(tl.int32)))

    return kernel


def test_encode_all_float32_patterns_match_hw_cast(writers):
    kernel = _exhaustive_kernel()
    counts = torch.zeros(3, dtype=torch.int32, device="cuda")
    block, chunk = 1024, 1 << 30
    for start in range(0, 1 << 32, chunk):
        kernel[(chunk // block,)](counts, start, BLOCK=block)
    torch.cuda.synchronize()
    within, beyond, nan = counts.tolist()
    print(f"e4m3 encode vs hardware conversion over 2^32 float32: {within} mismatches with |x| <= 448, "
          f"{beyond} beyond 448/inf, {nan} NaN inputs not NaN")
    assert (within, beyond, nan) == (0, 0, 0)


def run_in_tree(tree: Path, files, plugin: str, tmp_path: Path) -> None:
    """pytest on the tree's own test `files`, their modules loaded by `plugin`; all must pass, none
    may be skipped."""
    env = {**os.environ, "DSV4_WRITERS_TREE": str(tree),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    # --noconftest: vLLM's tests/conftest.py imports the whole of vLLM.
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "--noconftest", "-p", plugin,
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *(str(tree / f) for f in files)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    print(out[-4000:])
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    assert proc.returncode == 0, f"in-tree tests failed: {summary}"
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, summary


def test_in_tree_encode_tests_pass_on_gpu(vllm_trees, tmp_path):
    run_in_tree(vllm_trees[0], IN_TREE, "_dsv4_writers_plugin", tmp_path)
