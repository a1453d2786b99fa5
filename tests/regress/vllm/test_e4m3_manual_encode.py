"""vllm 5 (integer e4m3 encode in the DSV4 Triton cache writers on gfx936): the patched encoder and
K cache writer run with TRITON_INTERPRET=1 on CPU, FP8 casts made to fail as with the DTK Triton on
gfx936. Script: checks/e4m3_manual_encode.py."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "e4m3_manual_encode"


def test_manual_encode_matches_torch(vllm_check):
    """float32 -> e4m3 bits equal torch's float8_e4m3fn conversion on every e4m3 value, every
    midpoint (ties to even) and the values either side of it, subnormals, +-0, +-448, (448, 464],
    seeded random values; NaN gives 0x7F/0xFF."""
    assert_ok(vllm_check(CHECK), "encode_matches_torch_bit_exact")


def test_k_cache_writer_without_fp8_matches_oracle(vllm_check):
    """quantize_and_insert_k_cache on gfx936 without FP8 casts writes the writer oracle's bytes."""
    assert_ok(vllm_check(CHECK), "writer_without_fp8_matches_oracle")


def test_manual_encode_only_on_gfx936(vllm_check):
    """Only gfx936 asks the writer for the integer encode."""
    assert_ok(vllm_check(CHECK), "writer_integer_encode_only_on_gfx936")


def test_manual_encode_edge_codes(vllm_check):
    """Hard-coded e4m3 bytes (written from the format, checked against torch): ties to even around the
    smallest subnormal, the carry into the normals, 448, saturation of 465/480/1e4/inf to +-448,
    +-1e-40 to signed zero, NaN to 0x7F with its sign."""
    assert_ok(vllm_check(CHECK), "encode_edge_codes")


def test_every_writer_without_fp8_matches_torch_cast(vllm_check):
    """The indexer query quantizer and the three compressor kernels (the Triton writers gfx936 runs)
    on gfx936 without FP8 casts write the bytes the same writers write with torch's conversion."""
    assert_ok(vllm_check(CHECK), "writers_without_fp8_match_torch_cast")


def test_every_writer_gate_only_on_gfx936(vllm_check):
    """Each writer's launcher asks for the integer encode on gfx936 only (not on gfx942's FNUZ)."""
    assert_ok(vllm_check(CHECK), "every_writer_asks_for_integer_encode_only_on_gfx936")


def test_v32_indexer_q_launcher_never_runs_on_rocm(vllm_check):
    """The DeepSeek V3.2 indexer query kernel in sparse_attn_indexer.py, which the patch leaves
    alone, is refused on ROCm by its launcher, patched or not."""
    if os.environ.get("DSV4_INTENT"):  # no evidence for the patch (docs/patch-format.md)
        pytest.skip("a guard that passes without the patch too: not an intent test")
    assert_ok(vllm_check(CHECK), "v32_indexer_q_launcher_refuses_rocm")
    assert_ok(vllm_check(CHECK, patched=False), "v32_indexer_q_launcher_refuses_rocm")


def test_unpatched_writer_fails(vllm_check):
    """The pristine writer cannot run without FP8 conversion, and no arch gets an integer encode."""
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "writer_without_fp8_matches_oracle", "FP8 conversion is not supported")
    assert_fails(res, "writer_integer_encode_only_on_gfx936", "gfx936")
    assert_fails(res, "encode_matches_torch_bit_exact", "fp32_to_e4m3fn_manual")
    assert_fails(res, "encode_edge_codes", "fp32_to_e4m3fn_manual")
    assert_fails(res, "writers_without_fp8_match_torch_cast", "FP8 conversion is not supported")
    assert_fails(res, "every_writer_asks_for_integer_encode_only_on_gfx936", "gfx936")
