"""vllm 2 (integer e4m3 decode on gfx936): the patched Triton kernels run with TRITON_INTERPRET=1 on
CPU, FP8 casts made to fail as with the DTK Triton on gfx936; and the fix of the fallback decode's
inverse RoPE (its own patch where the launcher takes inverse-RoPE positions). Script:
checks/e4m3_manual_decode.py, the same for every release: where a release's gather is a JIT-warmup
kernel object it goes through its launcher; the inverse-RoPE sub-check does not apply to a tree
whose launcher takes no positions."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "e4m3_manual_decode"


def test_manual_decode_all_256_codes(vllm_check):
    """All 256 e4m3 codes through the decode kernel (one key, so out = K) equal the float64 oracle,
    signed zeros and subnormals included, NaN codes masked to 0 as the kernel does."""
    assert_ok(vllm_check(CHECK), "manual_decode_all_256_codes")


def test_decode_kernel_without_fp8_matches_reference(vllm_check):
    """_sparse_attn_decode_ragged_kernel without FP8 casts vs float64 attention over the oracle, vs
    the patched torch reference, and bit-equal to the FP8-cast kernel (padded block stride)."""
    assert_ok(vllm_check(CHECK), "decode_kernel_without_fp8_matches_reference")


def test_prefill_gather_without_fp8_matches_cast(vllm_check):
    """dequantize_and_gather_k_cache on gfx936 without FP8 casts equals the oracle bit for bit, a
    token holding every byte value included: DeepSeek V4's, and V4.1's where the tree has it."""
    assert_ok(vllm_check(CHECK), "prefill_gather_without_fp8_matches_cast")


def test_manual_decode_only_on_gfx936(vllm_check):
    """The launcher asks for the integer decode on gfx936 only: gfx90a, gfx11 and gfx12 keep the
    FP8 cast (upstream Triton lowers it there), gfx942/gfx950 take the split-K kernels."""
    assert_ok(vllm_check(CHECK), "manual_decode_only_on_gfx936")


def test_fallback_launcher_without_fp8(vllm_check):
    """The launcher's branch for archs other than gfx942/gfx950 (gfx936's) runs with every FP8 cast
    failing and gives the hardware-cast bits."""
    assert_ok(vllm_check(CHECK), "fallback_launcher_without_fp8")


def test_fallback_applies_inverse_rope(vllm_check):
    """The non-gfx942/gfx950 launcher branch hands back inverse-RoPE'd rows when given positions
    (rocm_sparse_attn_decode reports them rotated), matching an independent inverse GPT-J RoPE;
    on the unpatched tree the rows come back unrotated."""
    assert_ok(vllm_check(CHECK), "fallback_applies_inverse_rope")
    assert_fails(vllm_check(CHECK, patched=False), "fallback_applies_inverse_rope", "not rotated")


def test_unpatched_tree_fails(vllm_check):
    """The pristine kernels cannot run without FP8 conversion, and no arch gets an integer decode."""
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "decode_kernel_without_fp8_matches_reference", "FP8 conversion is not supported")
    assert_fails(res, "manual_decode_all_256_codes", "FP8 conversion is not supported")
    assert_fails(res, "prefill_gather_without_fp8_matches_cast", "FP8 conversion is not supported")
    assert_fails(res, "manual_decode_only_on_gfx936", "gfx936")
    assert_fails(res, "fallback_launcher_without_fp8")
