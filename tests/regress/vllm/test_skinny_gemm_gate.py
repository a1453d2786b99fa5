"""vllm 4 (skinny-GEMM capability gate): rocm_unquantized_gemm_impl's decision per arch and
VLLM_ROCM_USE_SKINNY_GEMM value, real modules, recorded ops. Script: checks/skinny_gemm_gate.py."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "skinny_gemm_gate"


def test_decision_table(vllm_check):
    """gfx90a/gfx942/gfx950/gfx1100: on unless set to 0; gfx936/gfx938: off unless set to 1."""
    assert_ok(vllm_check(CHECK), "decision_table")


def test_widened_gfx9_stays_off_on_dcu(vllm_check):
    """With on_gfx9() widened to gfx936/gfx938 (as DCU forks do), skinny GEMM stays off by default."""
    assert_ok(vllm_check(CHECK), "widened_gfx9_stays_off_on_dcu")


def test_explicit_value_logged_once(vllm_check):
    assert_ok(vllm_check(CHECK), "explicit_value_logged_once")


def test_unpatched_tree_fails(vllm_check):
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "decision_table", "gfx936")
    assert_fails(res, "widened_gfx9_stays_off_on_dcu", "used by default")
