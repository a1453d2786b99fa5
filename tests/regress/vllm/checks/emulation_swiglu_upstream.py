"""Whether upstream fixed what vllm 3 (forward SwiGLU alpha/beta in mxfp4.py) fixes (it did by v0.33.0,
its own way, which is why that series drops the patch): on the UNPATCHED tree, Mxfp4MoEMethod's
EMULATION quant config still carries no alpha/beta (gemm1_alpha/beta None), yet the real OCP_MXQuantizationEmulationTritonExperts hand silu_and_mul_with_clamp alpha 1.702 and
beta 1.0, because ApplyMoEActivationConfig.from_configs falls back to the FusedMoEConfig's
swiglu_alpha/swiglu_beta (which the layer fills from the model)."""

from __future__ import annotations

import types

import torch

from _harness import check, report, swapped

from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.config import (
    FusedMoEConfig,
    FusedMoEParallelConfig,
    RoutingMethodType,
)
from vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe import (
    OCP_MXQuantizationEmulationTritonExperts as Experts,
)
from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend
from vllm.model_executor.layers.quantization.mxfp4 import Mxfp4MoEMethod

I = 96


def quant_config(**layer_attrs):
    method = object.__new__(Mxfp4MoEMethod)
    method.mxfp4_backend = Mxfp4MoeBackend.EMULATION
    layer = types.SimpleNamespace(w13_weight_scale=torch.ones(1), w2_weight_scale=torch.ones(1), **layer_attrs)
    return method.get_fused_moe_quant_config(layer)


@check
def emulation_experts_get_alpha_and_beta_from_the_moe_config():
    qc = quant_config(swiglu_alpha=1.702, swiglu_beta=1.0, swiglu_limit=7.0)
    assert (qc.gemm1_alpha, qc.gemm1_beta) == (None, None), \
        f"mxfp4.py forwards alpha/beta itself here: {(qc.gemm1_alpha, qc.gemm1_beta)}"
    moe = FusedMoEConfig(
        num_experts=4, experts_per_token=2, hidden_dim=64, intermediate_size=I, num_local_experts=4,
        num_logical_experts=4, activation=MoEActivation.SWIGLUOAI_UNINTERLEAVE, device="cpu",
        routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16,
        swiglu_limit=7.0, swiglu_alpha=1.702, swiglu_beta=1.0)
    seen = []

    def standin(out, inp, limit, alpha=1.0, beta=0.0):  # the CUDA/ROCm kernel, recorded on the CPU
        seen.append((limit, alpha, beta))
        out.zero_()

    with swapped(torch.ops._C, "silu_and_mul_with_clamp", standin):
        e = Experts(moe, qc)
        x = torch.randn(8, 2 * I).bfloat16()
        e.activation(MoEActivation.SWIGLUOAI_UNINTERLEAVE, torch.empty(8, I, dtype=torch.bfloat16), x)
    assert seen == [(7.0, 1.702, 1.0)], f"kernel called with (limit, alpha, beta) {seen}"


report()
