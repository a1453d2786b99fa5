"""Aliases: the v0.33.0-series `Regression-Test:` trailers name these node ids. The tests are
../test_skinny_gemm_gate.py's, the same for every release (../conftest.py gives them the release under test); this
module only collects them under the ids those trailers name, and goes once the trailers name
../test_skinny_gemm_gate.py directly."""

from test_skinny_gemm_gate import (  # noqa: F401
    test_decision_table,
    test_widened_gfx9_stays_off_on_dcu,
    test_ignored_value_logged_once,
    test_upstream_gemm_tests_pass,
    test_unpatched_tree_fails,
)
