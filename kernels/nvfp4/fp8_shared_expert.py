"""DeepSeek V4 Pro's FP8 shared expert two ways, emulated in torch on the CPU: fused into `nvfp4_mega_moe`
(vLLM's MEGA_MOE_NVFP4 launch with MXFP8 shared experts) or run unfused (vLLM's block-FP8 linear layers),
for the number behind the DeepSeek V4 NVFP4 patch's choice to fuse.

The weights are the same in both: E4M3 with one UE8M0 scale per 128x128 block (DSV4's `scale_fmt: ue8m0`),
which the fused launch reads as MXFP8 (the block's scale repeated over each 1x32 group: exact). What differs
is how the activations are quantized:
- fused (`prepare_megamoe_nvfp4_inputs`, `SHARED_MXFP8`; the kernel's shared L1 epilogue): the input per
  1x32 group with a UE8M0 scale `2^ceil(log2(amax / 448))`; gate and up rounded to BF16, clamped, SwiGLU in
  FP32, and that FP32 intermediate requantized per 1x32 with a UE8M0 scale (`math::get_ue8m0_sf_exp`);
- unfused (Fp8LinearMethod's block path on SM100, DeepGEMM: `per_token_group_quant_fp8(group 128,
  use_ue8m0=True)`): the input per 1x128 group, gate_up out in BF16, SwiGLU out in BF16, requantized per
  1x128.
Both use the same UE8M0 rounding; `amax` is floored at 1e-4 as both kernels do."""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def quantize_ue8m0_groups(x: torch.Tensor, group: int) -> torch.Tensor:
    """x FP32 [T, K] -> dequantized E4M3 values with one power-of-two scale per 1 x group."""
    t, k = x.shape
    g = x.reshape(t, k // group, group)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    q = (g / scale).to(torch.float8_e4m3fn).float()
    return (q * scale).reshape(t, k)


def block_fp8_weight(w: torch.Tensor, block: int = 128) -> torch.Tensor:
    """w float [N, K] -> dequantized E4M3 weights with one UE8M0 scale per block x block (FP32 values)."""
    n, k = w.shape
    b = w.reshape(n // block, block, k // block, block)
    amax = b.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    return ((b / scale).to(torch.float8_e4m3fn).float() * scale).reshape(n, k)


def _swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float | None) -> torch.Tensor:
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(gate) * up


def fused(x: torch.Tensor, w1, w3, w2, limit: float | None = 10.0) -> torch.Tensor:
    """The MXFP8 shared expert inside the NVFP4 MegaMoE launch. x BF16 [T, H]; w* dequantized FP32."""
    a = quantize_ue8m0_groups(x.float(), 32)
    gate = (a @ w1.T).to(torch.bfloat16).float()
    up = (a @ w3.T).to(torch.bfloat16).float()
    h = quantize_ue8m0_groups(_swiglu(gate, up, limit), 32)
    return (h @ w2.T).to(torch.bfloat16)


def unfused(x: torch.Tensor, w1, w3, w2, limit: float | None = 10.0) -> torch.Tensor:
    """The same expert through vLLM's block-FP8 linear layers (1x128 activation groups, BF16 between)."""
    a = quantize_ue8m0_groups(x.float(), 128)
    gate = (a @ w1.T).to(torch.bfloat16).float()
    up = (a @ w3.T).to(torch.bfloat16).float()
    h = _swiglu(gate, up, limit).to(torch.bfloat16).float()
    return (quantize_ue8m0_groups(h, 128) @ w2.T).to(torch.bfloat16)


def ideal(x: torch.Tensor, w1, w3, w2, limit: float | None = 10.0) -> torch.Tensor:
    """The expert the FP8 checkpoint means: its weights, unquantized activations, float64."""
    x, w1, w3, w2 = (v.double() for v in (x, w1, w3, w2))
    return _swiglu(x @ w1.T, x @ w3.T, limit) @ w2.T
