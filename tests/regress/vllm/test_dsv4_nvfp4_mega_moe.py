"""vllm (DeepSeek V4 NVFP4 MegaMoE): `--moe-backend deep_gemm_mega_moe` on a DeepSeek V4 checkpoint
with ModelOpt NVFP4 experts builds DeepGEMM's NVFP4 MegaMoE, loads the checkpoint's tensors and
refuses where it cannot run; real modules on CPU. Script: checks/dsv4_nvfp4_mega_moe.py."""

import os

import pytest

from _vllm_regress import assert_fails, assert_ok

CHECK = "dsv4_nvfp4_mega_moe"


def test_nvfp4_checkpoint_selects_nvfp4_mega_moe(vllm_check):
    """moe_quant_algo NVFP4 -> an NVFP4 x NVFP4 MegaMoE (E4M3 scales per 16 values), not MXFP4; and an
    MXFP4 checkpoint still gets MXFP4 (a guard: it holds unpatched too, so it is no test of its own)."""
    assert_ok(vllm_check(CHECK), "nvfp4_checkpoint_selects_nvfp4_mega_moe", "mxfp4_checkpoint_unchanged")


def test_modelopt_nvfp4_tensors_load(vllm_check):
    """ModelOpt per-expert tensors load through DeepseekV4Model.load_weights into the kernel layout,
    with the checkpoint's FP32 global and input scales; w1/w3 input_scale are dropped."""
    assert_ok(vllm_check(CHECK), "modelopt_nvfp4_tensors_load")


def test_refusals(vllm_check):
    """A JIT nvcc 12.8 (DeepGEMM needs 12.9) and different w1/w3 global scales are refused in one line."""
    assert_ok(vllm_check(CHECK), "old_nvcc_refused", "different_w1_w3_scales_refused")


def test_upstream_tests_pass(vllm_check):
    """The tree's own tests/models/test_deepseek_v4_nvfp4_mega_moe.py, as the patch adds it, on CPU."""
    assert_ok(vllm_check(CHECK), "upstream_tests")


def test_unpatched_tree_fails(vllm_check):
    if os.environ.get("DSV4_INTENT"):
        pytest.skip("about the unpatched tree: not an intent test")
    res = vllm_check(CHECK, patched=False)
    assert_fails(res, "nvfp4_checkpoint_selects_nvfp4_mega_moe", "fp8_fp4_mega_moe")
    assert_fails(res, "modelopt_nvfp4_tensors_load")
    assert_fails(res, "old_nvcc_refused", "built with nvcc 12.8")
    assert_fails(res, "upstream_tests", "pytest exit")
