"""vllm 3: the OCP MX emulation experts' activation vs the float64 SwiGLU oracle (kernels/swiglu)."""

from __future__ import annotations

import os

import numpy as np
import torch

from _harness import check, report
from kernels.swiglu.naive import swiglu_ref

from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.config import (
    FusedMoEConfig,
    FusedMoEParallelConfig,
    RoutingMethodType,
    mxfp4_w4a16_moe_quant_config,
)
from vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe import (
    OCP_MXQuantizationEmulationTritonExperts as Experts,
)
from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

SEED = int.from_bytes(os.urandom(4), "little")
print("seed", SEED)
gen = torch.Generator().manual_seed(SEED)
I = 96


def experts(alpha, limit):
    moe = FusedMoEConfig(
        num_experts=4, experts_per_token=2, hidden_dim=64, intermediate_size=I, num_local_experts=4,
        num_logical_experts=4, activation=MoEActivation.SILU, device="cpu",
        routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16,
        swiglu_limit=limit, swiglu_alpha=alpha)
    # as Mxfp4MoEMethod builds it for the EMULATION backend (patched: alpha forwarded)
    qc = mxfp4_w4a16_moe_quant_config(w1_scale=torch.ones(1), w2_scale=torch.ones(1),
                                      gemm1_alpha=alpha, gemm1_clamp_limit=limit)
    return Experts(moe, qc)


def gate_up(n=64):
    x = torch.randn(n, 2 * I, generator=gen) * 6.0
    x[0, :4] = torch.tensor([10.0, 10.5, -40.0, 1e4])       # gate at / beyond the limit
    x[0, I:I + 4] = torch.tensor([-10.0, 12.0, -1e4, 9.99])  # up beyond +-limit
    return x.bfloat16()


def compare(alpha, limit):
    e = experts(alpha, limit)
    x = gate_up()
    out = torch.full((x.shape[0], I), float("nan"), dtype=torch.bfloat16)
    e.activation(MoEActivation.SILU, out, x)
    want = swiglu_ref(x[:, :I].double().numpy(), x[:, I:].double().numpy(), alpha=alpha, limit=limit)
    got = out.double().numpy()
    err = np.abs(got - want)
    tol = 2.0**-8 * np.abs(want) + 1e-6  # one bf16 rounding of the output
    bad = np.flatnonzero(err > tol)
    assert bad.size == 0, (f"alpha={alpha} limit={limit}: {bad.size} values off the oracle, worst "
                           f"{err.max():.4g} (got {got.flat[bad[0]]}, want {want.flat[bad[0]]})")


@check
def dsv4_config_matches_oracle():
    compare(1.0, 10.0)  # DeepSeek V4: swiglu_limit 10.0, alpha 1.0


@check
def alpha_and_limit_match_oracle():
    compare(1.702, 7.0)


@check
def no_alpha_no_limit_unchanged():
    e = experts(None, None)
    calls = []
    orig = TritonExperts.activation

    def spy(self, activation, output, input, **kw):
        calls.append((activation, output.data_ptr(), input.data_ptr()))

    TritonExperts.activation = spy
    try:
        x = gate_up()
        out = torch.zeros((x.shape[0], I), dtype=torch.bfloat16)
        e.activation(MoEActivation.SILU, out, x)
        assert calls == [(MoEActivation.SILU, out.data_ptr(), x.data_ptr())], calls
        assert torch.equal(out, torch.zeros_like(out)), "activation wrote the output itself"
    finally:
        TritonExperts.activation = orig


report()
