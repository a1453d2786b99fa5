"""vllm (DeepSeek V4 NVFP4 MegaMoE): what `--moe-backend deep_gemm_mega_moe` builds for a DeepSeek V4
checkpoint whose routed experts are ModelOpt NVFP4, with the real DeepseekV4MoE, DeepseekV4Model's
loader and DeepGemmMegaMoEExperts on CPU. Stand-ins only for what a CPU lacks: an SM100 device
(the platform object deep_gemm_mega_moe asks), a one-rank EP/TP group, DeepGEMM importable on a
GPU it supports (vllm.utils.deep_gemm's has_deep_gemm and support_deep_gemm, as upstream's
tests/utils_/test_deep_gemm_utils.py stubs them), and the nvcc DeepGEMM's JIT would run (a script
printing its release, found through CUDA_HOME / DG_JIT_NVCC_COMPILER as vLLM looks for it, where
the tree reads it: vLLM 0.34.0's is_deep_gemm_supported, or the v0.33.0 series' backport). No
kernel runs. Also runs the patched tree's
tests/models/test_deepseek_v4_nvfp4_mega_moe.py in this venv.

Weights are drawn from torch generators seeded with the expert index (0..3): fixed, printed below."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn as nn

from _harness import check, report, run_tree_tests

import vllm.distributed.parallel_state as parallel_state  # noqa: E402
import vllm.model_executor.layers.fused_moe.deep_gemm_mega_moe as mega_moe  # noqa: E402
import vllm.models.deepseek_v4.nvidia.model as dsv4  # noqa: E402
import vllm.utils.deep_gemm as deep_gemm_utils  # noqa: E402

print("seeds: torch.Generator().manual_seed(expert) for experts 0..3", flush=True)

HIDDEN, INTER, NUM_EXPERTS, TOP_K = 256, 128, 4, 2
GROUP = SimpleNamespace(world_size=1, rank_in_group=0)

# What a CPU lacks, at the names upstream's own tests patch.
mega_moe.current_platform = SimpleNamespace(
    device_type="cpu", is_device_capability_family=lambda cap, device_id=0: cap == 100)
deep_gemm_utils.has_deep_gemm = lambda: True
deep_gemm_utils.current_platform.support_deep_gemm = lambda: True
os.environ["VLLM_USE_DEEP_GEMM"] = "1"
dsv4.get_ep_group = lambda: GROUP
dsv4.get_tensor_model_parallel_world_size = lambda: 1
parallel_state.get_tp_group = lambda: GROUP

_TMP = Path(tempfile.mkdtemp(prefix="dsv4-nvcc-"))
atexit.register(shutil.rmtree, _TMP, True)


def use_nvcc(release: str) -> None:
    """Point DeepGEMM's JIT lookup at an nvcc reporting `release`; drop anything cached about it."""
    nvcc = _TMP / f"nvcc-{release}"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    os.environ["CUDA_HOME"] = str(_TMP)
    os.environ["DG_JIT_NVCC_COMPILER"] = str(nvcc)
    for mod in (dsv4, sys.modules.get("vllm.utils.deep_gemm")):
        for fn in vars(mod).values() if mod else ():
            if callable(getattr(fn, "cache_clear", None)):
                fn.cache_clear()


def vllm_config(moe_quant_algo):
    return SimpleNamespace(
        model_config=SimpleNamespace(dtype=torch.bfloat16, hf_config=SimpleNamespace(
            hidden_size=HIDDEN, n_routed_experts=NUM_EXPERTS, num_experts_per_tok=TOP_K,
            n_shared_experts=None, moe_intermediate_size=INTER, hidden_act="silu", swiglu_limit=10.0,
            norm_topk_prob=True, topk_method="noaux_tc", routed_scaling_factor=1.5,
            scoring_func="sqrtsoftplus")),
        quant_config=SimpleNamespace(moe_quant_algo=moe_quant_algo),
        kernel_config=SimpleNamespace(moe_backend="deep_gemm_mega_moe"),
        parallel_config=SimpleNamespace(enable_expert_parallel=True, enable_eplb=False,
                                        eplb_config=SimpleNamespace(num_redundant_experts=0)),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=4),
        compilation_config=SimpleNamespace(static_forward_context={}),
    )


def build_moe(moe_quant_algo):
    return dsv4.DeepseekV4MoE(vllm_config(moe_quant_algo), prefix="model.layers.3.ffn", num_hash_layers=0)


def routed_format(experts) -> tuple[str, torch.dtype | None, int | None]:
    """(DeepGEMM kernel, block-scale dtype, values per block scale) of the routed experts."""
    fmt = experts.weight_format
    return fmt.kernel, fmt.routed.scale_dtype, fmt.routed.scale_group_k


NVFP4_KERNELS = ("nvfp4_mega_moe", "fp4_fp4_mega_moe")  # either NVFP4 x NVFP4 MegaMoE is the fix


@check
def nvfp4_checkpoint_selects_nvfp4_mega_moe():
    use_nvcc("12.9")
    kernel, scale_dtype, group = routed_format(build_moe("NVFP4").experts)
    assert kernel in NVFP4_KERNELS and scale_dtype == torch.float8_e4m3fn and group == 16, (
        f"an NVFP4 checkpoint built {kernel} experts with {scale_dtype} scales per {group} values, "
        f"not an NVFP4 MegaMoE ({' or '.join(NVFP4_KERNELS)}, E4M3 per 16)")


@check
def mxfp4_checkpoint_unchanged():
    use_nvcc("12.9")
    kernel, scale_dtype, group = routed_format(build_moe(None).experts)
    assert (kernel, scale_dtype, group) == ("fp8_fp4_mega_moe", torch.float8_e8m0fnu, 32), (kernel, scale_dtype, group)


@check
def old_nvcc_refused():
    use_nvcc("12.8")
    try:
        build_moe("NVFP4")
    except NotImplementedError as e:
        assert "12.9" in str(e), f"refused for another reason: {e}"
    else:
        raise AssertionError("an NVFP4 MegaMoE was built with nvcc 12.8 (no .block16)")


class OneLayer(nn.Module):
    load_weights = dsv4.DeepseekV4Model.load_weights

    def __init__(self, moe):
        super().__init__()
        self.layers = nn.ModuleList([nn.Module() for _ in range(4)])
        self.layers[3].ffn = moe
        self.quant_config = None
        self.use_sequence_parallel = False
        self.use_native_mega_moe = True

    def get_expert_mapping(self):
        return dsv4.make_deepseek_v4_expert_params_mapping(NUM_EXPERTS)


def modelopt_expert(e: int, w1_scale_2: float, w3_scale_2: float):
    gen = torch.Generator().manual_seed(e)
    out, w1 = [], None
    for shard, (rows, cols), s2 in (("w1", (INTER, HIDDEN), w1_scale_2), ("w3", (INTER, HIDDEN), w3_scale_2),
                                    ("w2", (HIDDEN, INTER), 0.5)):
        name = f"layers.3.ffn.experts.{e}.{shard}"
        weight = torch.randint(0, 256, (rows, cols // 2), generator=gen).to(torch.uint8)
        scale = (torch.rand(rows, cols // 16, generator=gen) + 0.5).to(torch.float8_e4m3fn)
        out += [(f"{name}.weight", weight), (f"{name}.weight_scale", scale),
                (f"{name}.weight_scale_2", torch.tensor(s2)), (f"{name}.input_scale", torch.tensor(0.125 * (e + 1)))]
        w1 = weight if shard == "w1" else w1
    return out, w1


@check
def modelopt_nvfp4_tensors_load():
    """ModelOpt's per-expert tensors (E2M1 bytes, E4M3 block scales, weight_scale_2, input_scale) load
    through DeepseekV4Model.load_weights; the FP32 scales are the checkpoint's; the gate rows are the
    checkpoint's bytes in the kernel's 8-row gate/up interleave."""
    use_nvcc("12.9")
    model = OneLayer(build_moe("NVFP4"))
    experts = model.layers[3].ffn.experts
    w1 = {}
    for e in range(NUM_EXPERTS):
        tensors, w1[e] = modelopt_expert(e, 2.0 ** -e, 2.0 ** -e)
        model.load_weights(tensors)
    g = experts.w13_weight_scale_2
    assert torch.equal(g, torch.tensor([2.0 ** -e for e in range(NUM_EXPERTS)])), g
    assert torch.equal(experts.w2_input_scale, torch.tensor([0.125 * (e + 1) for e in range(NUM_EXPERTS)]))
    for e in range(NUM_EXPERTS):
        gate = experts.w13_weight[e].view(-1, 2, 8, HIDDEN // 2)[:, 0].reshape(INTER, -1)
        assert torch.equal(gate, w1[e].view(torch.int8)), f"expert {e}: gate rows differ from the checkpoint"


@check
def different_w1_w3_scales_refused():
    use_nvcc("12.9")
    model = OneLayer(build_moe("NVFP4"))
    tensors, _ = modelopt_expert(1, 1.0, 0.5)
    try:
        model.load_weights(tensors)
    except ValueError as e:
        assert "weight_scale_2" in str(e), f"refused for another reason: {e}"
    else:
        raise AssertionError("w1/w3 weight_scale_2 1.0 vs 0.5 loaded into one L1 alpha")


@check
def upstream_tests():
    """The patched tree's tests/models/test_deepseek_v4_nvfp4_mega_moe.py, here with pytest."""
    run_tree_tests(os.environ["DSV4_TREE_VLLM"], "tests/models/test_deepseek_v4_nvfp4_mega_moe.py")


report()
