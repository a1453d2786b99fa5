"""vllm 1 (sparse MLA reader): the patched PyTorch reference decode vs the fp8_ds_mla oracle.

Integration level: vllm.v1.attention.ops.rocm_aiter_mla_sparse imported from the vLLM 0.27.1 wheel
with the patched files overlaid, on CPU. The check script: checks/sparse_mla_reader.py."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "sparse_mla_reader"


def test_reader_matches_oracle(vllm_check):
    """Caches written by the oracle encoder (block stride > block): max_abs 0, NaN-free."""
    assert_ok(vllm_check(CHECK), "reader_matches_oracle")


def test_decode_matches_reference_attention(vllm_check):
    """rocm_sparse_attn_decode with the torch decode (SWA + compressed caches, ragged and dense
    indices, sink) vs float64 attention over the oracle's dequantized K."""
    assert_ok(vllm_check(CHECK), "decode_matches_reference_attention")


def test_validate_raises_on_nan(vllm_check):
    """VLLM_ROCM_SPARSE_MLA_VALIDATE=1 raises on a NaN code in K NoPE/RoPE (torch and Triton path
    selected) and on overflowing logits; a clean cache passes."""
    assert_ok(vllm_check(CHECK), "validate_raises_on_nan")


def test_validate_checks_triton_output(vllm_check):
    """With the Triton decode selected, validation compares its output with the reference: a
    correct output passes untouched, one 3 % of max |K| off raises."""
    assert_ok(vllm_check(CHECK), "validate_checks_triton_output")


def test_validate_off_costs_nothing(vllm_check):
    """Validation off: the Triton output passes through, no host sync, a NaN in the cache raises
    nothing."""
    if os.environ.get("DSV4_INTENT"):  # no evidence for the patch (docs/patch-format.md)
        pytest.skip("a guard that passes without the patch too: not an intent test")
    assert_ok(vllm_check(CHECK), "validate_off_costs_nothing")


def test_host_sync_decode_disables_cudagraphs(vllm_check):
    """Torch decode or validation on: the DSV4 ROCm builders report no CUDA graph support, and a
    decode asked to run during a capture raises a clear error."""
    assert_ok(vllm_check(CHECK), "host_sync_decode_disables_cudagraphs", "decode_refuses_capture")


def test_aiter_path_yields_to_the_switches(vllm_check):
    """v0.33.0+: with the torch decode or validation on, the AITER sparse MLA kernel (which bypasses
    rocm_sparse_attn_decode) is not chosen; the pristine tree still chooses it."""
    assert_ok(vllm_check(CHECK), "aiter_path_yields_to_the_switches")
    assert_fails(vllm_check(CHECK, patched=False), "aiter_path_yields_to_the_switches", "still chosen")


def test_unpatched_tree_fails(vllm_check):
    """The same check against the pristine 0.27.1 install: no reference decode, no validation."""
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "reader_matches_oracle", "dequantize_fp8_ds_mla_torch")
    assert_fails(res, "decode_matches_reference_attention")
    assert_fails(res, "validate_raises_on_nan")
    assert_fails(res, "validate_checks_triton_output", "let a Triton output")
    assert_fails(res, "host_sync_decode_disables_cudagraphs", "NEVER")
    assert_fails(res, "decode_refuses_capture")
