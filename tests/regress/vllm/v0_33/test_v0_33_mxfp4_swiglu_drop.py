"""Evidence for dropping vllm 3 at v0.33.0 (no patch binds it; it runs on the pristine tree):
unpatched v0.33.0 EMULATION experts already receive alpha 1.702 / beta 1.0 from the MoE config.
Script: v0_33/checks/emulation_swiglu_v0_33.py."""

from _vllm_regress import assert_ok


def test_unpatched_emulation_experts_get_alpha_and_beta(vllm_check):
    assert_ok(vllm_check("emulation_swiglu_v0_33", patched=False),
              "emulation_experts_get_alpha_and_beta_from_the_moe_config")
