"""vllm 1 (sparse MLA reader, resolution recorded for v0.33.0) on v0.33.0: ../checks/sparse_mla_reader.py
unchanged, same sub-checks and names as ../test_sparse_mla_reader.py."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "sparse_mla_reader"


def test_reader_matches_oracle(vllm_check):
    assert_ok(vllm_check(CHECK), "reader_matches_oracle")


def test_decode_matches_reference_attention(vllm_check):
    assert_ok(vllm_check(CHECK), "decode_matches_reference_attention")


def test_validate_raises_on_nan(vllm_check):
    assert_ok(vllm_check(CHECK), "validate_raises_on_nan")


def test_validate_off_costs_nothing(vllm_check):
    assert_ok(vllm_check(CHECK), "validate_off_costs_nothing")


def test_unpatched_tree_fails(vllm_check):
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "reader_matches_oracle", "dequantize_fp8_ds_mla_torch")
    assert_fails(res, "decode_matches_reference_attention")
    assert_fails(res, "validate_raises_on_nan")
    assert_fails(res, "validate_off_costs_nothing")
