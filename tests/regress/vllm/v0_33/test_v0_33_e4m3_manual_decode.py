"""Aliases: the v0.33.0-series `Regression-Test:` trailers name these node ids. The tests are
../test_e4m3_manual_decode.py's, the same for every release (../conftest.py gives them the release under test); this
module only collects them under the ids those trailers name, and goes once the trailers name
../test_e4m3_manual_decode.py directly."""

from test_e4m3_manual_decode import (  # noqa: F401
    test_manual_decode_all_256_codes,
    test_decode_kernel_without_fp8_matches_reference,
    test_prefill_gather_without_fp8_matches_cast,
    test_manual_decode_only_on_gfx936,
    test_fallback_launcher_without_fp8,
    test_fallback_applies_inverse_rope,
    test_unpatched_tree_fails,
)
