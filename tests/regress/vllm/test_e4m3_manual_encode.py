"""vllm 5 (integer e4m3 encode in the DSV4 Triton cache writers on gfx936): the patched encoder and
K cache writer run with TRITON_INTERPRET=1 on CPU, FP8 casts made to fail as with the DTK Triton on
gfx936. Script: checks/e4m3_manual_encode.py."""

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


def test_unpatched_writer_fails(vllm_check):
    """The pristine writer cannot run without FP8 conversion, and no arch gets an integer encode."""
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "writer_without_fp8_matches_oracle", "FP8 conversion is not supported")
    assert_fails(res, "writer_integer_encode_only_on_gfx936", "gfx936")
    assert_fails(res, "encode_matches_torch_bit_exact", "fp32_to_e4m3fn_manual")
