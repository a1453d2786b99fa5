"""vllm 2 (manual OCP E4M3 decode): the patched Triton sparse decode kernel run with
TRITON_INTERPRET=1 on CPU, FP8 casts made to fail as on gfx936. Script: checks/e4m3_manual_decode.py."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "e4m3_manual_decode"


def test_manual_decode_all_256_codes(vllm_check):
    """_e4m3fn_to_bf16_manual equals the float64 oracle and torch's float8_e4m3fn on all 256 codes
    (NaN, signed zeros, subnormals), with every FP8 cast failing."""
    assert_ok(vllm_check(CHECK), "manual_decode_all_256_codes")


def test_decode_kernel_without_fp8_matches_reference(vllm_check):
    """_sparse_attn_decode_ragged_kernel with MANUAL_E4M3 and no FP8 casts vs float64 attention
    over the oracle, vs the patched torch reference, and bit-equal to the hardware-cast kernel."""
    assert_ok(vllm_check(CHECK), "decode_kernel_without_fp8_matches_reference")


def test_manual_decode_selected_without_fp8(vllm_check):
    """The launchers pick the manual decode on gfx936 and keep the FP8 cast on gfx942/gfx950/gfx12."""
    assert_ok(vllm_check(CHECK), "manual_decode_selected_without_fp8")


def test_unpatched_tree_fails(vllm_check):
    """The pristine kernel cannot run without FP8 conversion."""
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "decode_kernel_without_fp8_matches_reference", "FP8 conversion is not supported")
    assert_fails(res, "manual_decode_all_256_codes")
    assert_fails(res, "manual_decode_selected_without_fp8")
