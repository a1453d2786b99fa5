"""vllm 3 (SwiGLU alpha/limit, applies with offsets) on v0.33.0: ../checks/emulation_swiglu.py
unchanged, same sub-checks and names as ../test_emulation_swiglu.py."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "emulation_swiglu"


def test_dsv4_config_matches_oracle(vllm_check):
    assert_ok(vllm_check(CHECK), "dsv4_config_matches_oracle")


def test_alpha_and_limit_match_oracle(vllm_check):
    assert_ok(vllm_check(CHECK), "alpha_and_limit_match_oracle")


def test_no_alpha_no_limit_unchanged(vllm_check):
    assert_ok(vllm_check(CHECK), "no_alpha_no_limit_unchanged")


def test_unpatched_tree_fails(vllm_check):
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "alpha_and_limit_match_oracle", "values off the oracle")
    assert_ok(res, "dsv4_config_matches_oracle", "no_alpha_no_limit_unchanged")
