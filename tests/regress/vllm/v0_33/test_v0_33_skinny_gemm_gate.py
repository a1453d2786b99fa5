"""vllm 4 (skinny-GEMM capability gate) on v0.33.0: ../checks/skinny_gemm_gate.py runs unchanged
against v0.33.0's rocm_unquantized_gemm_impl (batch-invariant branch first, on_gfx1x() without
gfx1250) and vllm.platforms.rocm."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "skinny_gemm_gate"


def test_decision_table(vllm_check):
    """gfx90a/gfx942/gfx950/gfx1100: on unless set to 0; gfx936/gfx938: off unless set to 1."""
    assert_ok(vllm_check(CHECK), "decision_table")


def test_widened_gfx9_stays_off_on_dcu(vllm_check):
    assert_ok(vllm_check(CHECK), "widened_gfx9_stays_off_on_dcu")


def test_explicit_value_logged_once(vllm_check):
    assert_ok(vllm_check(CHECK), "explicit_value_logged_once")


def test_unpatched_tree_fails(vllm_check):
    """Pristine v0.33.0 ignores an explicit 1 on gfx936/gfx938 and follows a widened on_gfx9()."""
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "decision_table", "gfx936")
    assert_fails(res, "widened_gfx9_stays_off_on_dcu", "used by default")
