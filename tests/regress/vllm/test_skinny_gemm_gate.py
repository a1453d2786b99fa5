"""vllm 4 (skinny-GEMM capability gate): rocm_unquantized_gemm_impl's decision per arch and
VLLM_ROCM_USE_SKINNY_GEMM value, real modules, recorded ops. Script: checks/skinny_gemm_gate.py."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "skinny_gemm_gate"


def test_decision_table(vllm_check):
    """Archs with compiled kernels: on unless set to 0. All others (gfx906/908/1030/936/938/1250),
    also with on_gfx9() widened as DCU forks do: off, whatever the variable says."""
    assert_ok(vllm_check(CHECK), "decision_table")


def test_widened_gfx9_stays_off_on_dcu(vllm_check):
    """With on_gfx9() widened to gfx936/gfx938 (as DCU forks do), skinny GEMM stays off by default."""
    assert_ok(vllm_check(CHECK), "widened_gfx9_stays_off_on_dcu")


def test_ignored_value_logged_once(vllm_check):
    """VLLM_ROCM_USE_SKINNY_GEMM=1 on gfx936: no stub dispatched, one warning that it is ignored."""
    assert_ok(vllm_check(CHECK), "ignored_value_logged_once")


def test_upstream_gemm_tests_pass(vllm_check):
    """The tree's own tests/model_executor/layers/test_rocm_unquantized_gemm.py, as the patch
    leaves it (upstream's dispatch tests and the new gate tests), pass on CPU."""
    if os.environ.get("DSV4_INTENT"):  # no evidence for the patch (docs/patch-format.md)
        pytest.skip("the tree's own tests, which pass on the pristine tree too: not an intent test")
    assert_ok(vllm_check(CHECK), "upstream_gemm_tests")


def test_unpatched_tree_fails(vllm_check):
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "decision_table", "widened")
    assert_fails(res, "widened_gfx9_stays_off_on_dcu", "used by default")
    assert_fails(res, "ignored_value_logged_once", "dispatched the stub")
    assert_fails(res, "upstream_gemm_tests", "pytest exit")
