"""vllm 4 (skinny-GEMM capability gate) on v0.33.0: ../checks/skinny_gemm_gate.py runs unchanged
against v0.33.0's rocm_unquantized_gemm_impl (batch-invariant branch first, on_gfx1x() without
gfx1250) and vllm.platforms.rocm, and runs the v0.33.0 tree's own test_rocm_unquantized_gemm.py."""

# The same tests as ../test_skinny_gemm_gate.py, collected here so that they request this folder's
# fixtures (the v0.33.0 venvs); the check script runs unchanged.
from test_skinny_gemm_gate import (  # noqa: E402,F401
    test_decision_table,
    test_widened_gfx9_stays_off_on_dcu,
    test_ignored_value_logged_once,
    test_upstream_gemm_tests_pass,
    test_unpatched_tree_fails,
)
