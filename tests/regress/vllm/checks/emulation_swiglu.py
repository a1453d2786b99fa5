"""vllm 3: the MXFP4 EMULATION MoE gets the layer's SwiGLU parameters, built the way vLLM builds it
(Mxfp4MoEMethod.get_fused_moe_quant_config), and its experts' activation uses them."""

from __future__ import annotations

import os
import types

import numpy as np
import torch

from _harness import check, report, swapped, seed

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

SEED = seed(os.environ.get("DSV4_SEED"))  # the run's seed (tests/conftest.py); printed
gen = torch.Generator().manual_seed(SEED)
I = 96


def swiglu_oracle(gate, up, alpha=1.0, beta=0.0, limit=None):
    """float64, vLLM's convention (activation_kernels.cu): gate * sigmoid(alpha * gate) * (up + beta),
    gate clamped to max=limit and up to +-limit when limit > 0."""
    g, u = np.asarray(gate, np.float64), np.asarray(up, np.float64)
    if limit is not None and limit > 0:
        g, u = np.minimum(g, limit), np.clip(u, -limit, limit)
    return g / (1.0 + np.exp(-alpha * g)) * (u + beta)


def quant_config(**swiglu):
    """The EMULATION quant config as Mxfp4MoEMethod builds it for a layer with these attributes."""
    method = object.__new__(Mxfp4MoEMethod)
    method.mxfp4_backend = Mxfp4MoeBackend.EMULATION
    layer = types.SimpleNamespace(w13_weight_scale=torch.ones(1), w2_weight_scale=torch.ones(1), **swiglu)
    return method.get_fused_moe_quant_config(layer)


def experts(activation, **swiglu):
    moe = FusedMoEConfig(
        num_experts=4, experts_per_token=2, hidden_dim=64, intermediate_size=I, num_local_experts=4,
        num_logical_experts=4, activation=activation, device="cpu",
        routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16)
    return Experts(moe, quant_config(**swiglu))


def gate_up(n=64):
    x = torch.randn(n, 2 * I, generator=gen) * 6.0
    x[0, :4] = torch.tensor([10.0, 10.5, -40.0, 1e4])       # gate at / beyond the limit
    x[0, I:I + 4] = torch.tensor([-10.0, 12.0, -1e4, 9.99])  # up beyond +-limit
    return x.bfloat16()


@check
def quant_config_forwards_alpha_and_beta():
    qc = quant_config(swiglu_alpha=1.702, swiglu_beta=1.0, swiglu_limit=7.0)
    got = (qc.gemm1_alpha, qc.gemm1_beta, qc.gemm1_clamp_limit)
    assert got == (1.702, 1.0, 7.0), f"(alpha, beta, limit) in the EMULATION quant config: {got}"
    qc = quant_config(swiglu_limit=10.0)  # DeepSeek V4: no alpha/beta configured
    got = (qc.gemm1_alpha, qc.gemm1_beta, qc.gemm1_clamp_limit)
    assert got == (None, None, 10.0), f"layer without alpha/beta: {got}"


@check
def experts_kernel_gets_alpha_and_beta():
    """SWIGLUOAI_UNINTERLEAVE goes to the silu_and_mul_with_clamp kernel (CUDA/ROCm only): a CPU
    stand-in records what the emulation experts hand it."""
    seen = []

    def standin(out, inp, limit, alpha=1.0, beta=0.0):
        seen.append((limit, alpha, beta))
        d = inp.shape[-1] // 2
        out.copy_(torch.from_numpy(swiglu_oracle(inp[:, :d].float(), inp[:, d:].float(),
                                                 alpha, beta, limit)).to(out.dtype))

    with swapped(torch.ops._C, "silu_and_mul_with_clamp", standin):
        e = experts(MoEActivation.SWIGLUOAI_UNINTERLEAVE, swiglu_alpha=1.702, swiglu_beta=1.0,
                    swiglu_limit=7.0)
        x = gate_up()
        out = torch.empty(x.shape[0], I, dtype=torch.bfloat16)
        e.activation(MoEActivation.SWIGLUOAI_UNINTERLEAVE, out, x)
    assert seen == [(7.0, 1.702, 1.0)], f"kernel called with (limit, alpha, beta) {seen}"


@check
def dsv4_silu_limit_matches_oracle():
    """DeepSeek V4 (SILU, limit 10.0, no alpha): the inherited activation is already right, and a
    limit of 0 means no clamp."""
    for limit in (10.0, 0.0):
        e = experts(MoEActivation.SILU, swiglu_limit=limit)
        x = gate_up()
        out = torch.full((x.shape[0], I), float("nan"), dtype=torch.bfloat16)
        e.activation(MoEActivation.SILU, out, x)
        want = swiglu_oracle(x[:, :I].double().numpy(), x[:, I:].double().numpy(), limit=limit)
        got = out.double().numpy()
        tol = 2.0**-7 * np.abs(want) + 1e-6  # the bf16 inputs' products, one bf16 rounding
        bad = np.flatnonzero(np.abs(got - want) > tol)
        assert bad.size == 0, f"limit {limit}: {bad.size} values off the oracle"


report()
