"""vllm 3 (SwiGLU alpha/limit in the MXFP4 emulation MoE): the real
OCP_MXQuantizationEmulationTritonExperts.activation vs the float64 oracle kernels/swiglu.
Script: checks/emulation_swiglu.py."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "emulation_swiglu"


def test_dsv4_config_matches_oracle(vllm_check):
    """DeepSeek V4: alpha 1.0, limit 10.0, values beyond the limit included."""
    assert_ok(vllm_check(CHECK), "dsv4_config_matches_oracle")


def test_alpha_and_limit_match_oracle(vllm_check):
    """A config with alpha 1.702 and limit 7.0: alpha applied after the gate clamp."""
    assert_ok(vllm_check(CHECK), "alpha_and_limit_match_oracle")


def test_no_alpha_no_limit_unchanged(vllm_check):
    """A config with neither: the inherited TritonExperts activation runs, unchanged."""
    assert_ok(vllm_check(CHECK), "no_alpha_no_limit_unchanged")


def test_unpatched_tree_fails(vllm_check):
    """Pristine 0.27.1 drops alpha. (DeepSeek V4's own values, alpha 1.0, already match there.)"""
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "alpha_and_limit_match_oracle", "values off the oracle")
    assert_ok(res, "dsv4_config_matches_oracle", "no_alpha_no_limit_unchanged")
