"""vllm 2 (integer e4m3 decode on gfx936) on v0.33.0. Script: v0_33/checks/e4m3_manual_decode_v0_33.py
(which runs ../checks/e4m3_manual_decode.py first)."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "e4m3_manual_decode_v0_33"


def test_manual_decode_all_256_codes(vllm_check):
    assert_ok(vllm_check(CHECK), "manual_decode_all_256_codes")


def test_decode_kernel_without_fp8_matches_reference(vllm_check):
    assert_ok(vllm_check(CHECK), "decode_kernel_without_fp8_matches_reference")


def test_prefill_gather_without_fp8_matches_cast(vllm_check):
    """v0.33.0's gather is a JIT-warmup kernel class; the same behaviour through its launcher."""
    assert_ok(vllm_check(CHECK), "prefill_gather_without_fp8_matches_cast")


def test_manual_decode_only_on_gfx936(vllm_check):
    assert_ok(vllm_check(CHECK), "manual_decode_only_on_gfx936")


def test_fallback_launcher_without_fp8(vllm_check):
    """v0.33.0's launcher branch for archs other than gfx942/gfx950 (gfx936's) runs with every FP8
    cast failing and gives the hardware-cast bits."""
    assert_ok(vllm_check(CHECK), "fallback_launcher_without_fp8")


def test_unpatched_tree_fails(vllm_check):
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "decode_kernel_without_fp8_matches_reference", "FP8 conversion is not supported")
    assert_fails(res, "manual_decode_all_256_codes", "FP8 conversion is not supported")
    assert_fails(res, "prefill_gather_without_fp8_matches_cast", "FP8 conversion is not supported")
    assert_fails(res, "manual_decode_only_on_gfx936", "gfx936")
    assert_fails(res, "fallback_launcher_without_fp8")
