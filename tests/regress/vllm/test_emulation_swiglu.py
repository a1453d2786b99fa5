"""vllm 3 (SwiGLU alpha/beta for the MXFP4 EMULATION MoE): the quant config Mxfp4MoEMethod builds
and what the real OCP_MXQuantizationEmulationTritonExperts hand their SwiGLU kernel.
Script: checks/emulation_swiglu.py."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "emulation_swiglu"


def test_quant_config_forwards_alpha_and_beta(vllm_check):
    """get_fused_moe_quant_config carries the layer's swiglu_alpha/beta/limit (None when absent)."""
    assert_ok(vllm_check(CHECK), "quant_config_forwards_alpha_and_beta")


def test_experts_kernel_gets_alpha_and_beta(vllm_check):
    """The emulation experts call silu_and_mul_with_clamp with limit 7.0, alpha 1.702, beta 1.0."""
    assert_ok(vllm_check(CHECK), "experts_kernel_gets_alpha_and_beta")


def test_dsv4_silu_limit_matches_oracle(vllm_check):
    """DeepSeek V4's SILU with limit 10 (and limit 0 = no clamp) vs the float64 oracle. A guard (the
    patch must leave this path as it is), not evidence for the patch: it passes on the pristine tree
    (test_unpatched_tree_fails asserts so), so it is no Regression-Test of the patch (issue 29 item 6)."""
    assert_ok(vllm_check(CHECK), "dsv4_silu_limit_matches_oracle")


def test_unpatched_tree_fails(vllm_check):
    """The pristine tree drops alpha and beta; DeepSeek V4's own SILU path is right there already."""
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "quant_config_forwards_alpha_and_beta", "(None, None, 7.0)")
    assert_fails(res, "experts_kernel_gets_alpha_and_beta", "(7.0, 1.0, 0.0)")
    assert_ok(res, "dsv4_silu_limit_matches_oracle")


@pytest.mark.fixed_upstream("forward-swiglu-alpha-and-beta-to-the-mxfp4-emulation-moe")
def test_unpatched_emulation_experts_get_alpha_and_beta(vllm_check):
    """Evidence for dropping the patch where a series does not carry it: on the UNPATCHED tree the
    EMULATION quant config still carries no alpha/beta, yet the real emulation experts hand the kernel
    alpha 1.702 and beta 1.0 from the FusedMoEConfig. Script: checks/emulation_swiglu_upstream.py."""
    assert_ok(vllm_check("emulation_swiglu_upstream", patched=False),
              "emulation_experts_get_alpha_and_beta_from_the_moe_config")
