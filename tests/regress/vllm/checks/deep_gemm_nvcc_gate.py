"""vllm (DeepGEMM's JIT nvcc gate): is_deep_gemm_supported() with DeepGEMM importable on a GPU it
supports (vllm.utils.deep_gemm's has_deep_gemm and support_deep_gemm stubbed, as upstream's
tests/utils_/test_deep_gemm_utils.py stubs them) and the nvcc its JIT would run under CUDA_HOME: none,
12.8, 12.9, 13.0 (a script printing its release). No GPU, no kernel. Also runs the tree's
tests/utils_/test_deep_gemm_utils.py in this venv."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

from _harness import check, report, run_tree_tests

import vllm.utils.deep_gemm as deep_gemm_utils  # noqa: E402

deep_gemm_utils.has_deep_gemm = lambda: True
deep_gemm_utils.current_platform.support_deep_gemm = lambda: True
os.environ["VLLM_USE_DEEP_GEMM"] = "1"
_TMP = Path(tempfile.mkdtemp(prefix="dsv4-nvcc-gate-"))
atexit.register(shutil.rmtree, _TMP, True)


def supported_with(release: str | None) -> bool:
    """is_deep_gemm_supported() with CUDA_HOME holding an nvcc that reports `release` (None: no nvcc)."""
    for var in ("CUDA_PATH", "DG_JIT_NVCC_COMPILER", "DJ_JIT_NVCC_COMPILER"):
        os.environ.pop(var, None)
    home = _TMP / (release or "none")
    (home / "bin").mkdir(parents=True, exist_ok=True)
    if release:
        nvcc = home / "bin" / "nvcc"
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
        nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    os.environ["CUDA_HOME"] = str(home)
    deep_gemm_utils.is_deep_gemm_supported.cache_clear()
    return bool(deep_gemm_utils.is_deep_gemm_supported())


@check
def old_or_missing_nvcc_disables_deep_gemm():
    got = {release: supported_with(release) for release in (None, "12.8", "12.9", "13.0")}
    want = {None: False, "12.8": False, "12.9": True, "13.0": True}
    assert got == want, f"is_deep_gemm_supported() per JIT nvcc release (None: no nvcc): {got}, want {want}"


@check
def upstream_tests():
    """The tree's tests/utils_/test_deep_gemm_utils.py, here with pytest."""
    run_tree_tests(os.environ["DSV4_TREE_VLLM"], "tests/utils_/test_deep_gemm_utils.py")


report()
