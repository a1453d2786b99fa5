"""vllm (DeepGEMM's JIT nvcc gate, the v0.33.0 series' backport of vLLM 0.34.0's): DeepGEMM is
reported unsupported when the nvcc its JIT would run is missing or older than 12.9, so its callers
take their fallbacks instead of aborting at the first compile. Script: checks/deep_gemm_nvcc_gate.py."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "deep_gemm_nvcc_gate"


def test_old_or_missing_nvcc_disables_deep_gemm(vllm_check):
    """No nvcc or nvcc 12.8 -> not supported; 12.9 and 13.0 -> supported."""
    assert_ok(vllm_check(CHECK), "old_or_missing_nvcc_disables_deep_gemm")


def test_upstream_tests_pass(vllm_check):
    """The tree's tests/utils_/test_deep_gemm_utils.py, as the patch adds it, on CPU."""
    assert_ok(vllm_check(CHECK), "upstream_tests")


def test_unpatched_tree_fails(vllm_check):
    if os.environ.get("DSV4_INTENT"):
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "old_or_missing_nvcc_disables_deep_gemm", "'12.8': True")
    assert_fails(res, "upstream_tests", "pytest exit")  # the tree's new tests fail on unpatched code
