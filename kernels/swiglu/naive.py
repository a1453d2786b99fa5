"""SwiGLU with alpha, beta and limit, in vLLM's convention (its activation kernels, SWIGLUOAI and the
flashinfer/trtllm MoE paths):

    gate = clamp(gate, max=limit)          (upper clamp only)
    up   = clamp(up, -limit, limit)
    act  = gate * sigmoid(alpha * gate) * (up + beta)

alpha sits inside the sigmoid only; it is not silu(alpha * gate) = alpha * gate * sigmoid(alpha * gate),
which differs by the factor alpha (the two agree only at alpha = 1, so DeepSeek V4 cannot tell them
apart). A limit that is None or <= 0 means "no clamp", as everywhere upstream. DeepSeek V4 uses
alpha = 1.0, beta = 0.0 and limit = 10.0 (`swiglu_limit` in the model config), which is
silu(clamped gate) * clamped up; gpt-oss uses alpha = 1.702, beta = 1.0, limit = 7.0 on interleaved
gate/up, constants that must not reach the DeepSeek path.

Non-finite inputs follow IEEE arithmetic, as torch's F.silu does: silu(-inf) = -inf * 0 = NaN, NaN
propagates through the clamps, an infinite `up` is clamped only when limit is set.
"""

from __future__ import annotations

import numpy as np
import torch

DSV4_SWIGLU_ALPHA = 1.0
DSV4_SWIGLU_LIMIT = 10.0


def _clamps(limit: float | None) -> bool:
    return limit is not None and limit > 0


def swiglu_ref(gate, up, alpha: float | None = None, limit: float | None = None,
               beta: float | None = None) -> np.ndarray:
    """float64 oracle; gate and up are array-likes of the same shape."""
    g = np.asarray(gate, dtype=np.float64)
    u = np.asarray(up, dtype=np.float64)
    if _clamps(limit):
        g = np.minimum(g, limit)  # np.minimum propagates NaN, like torch.clamp
        u = np.clip(u, -limit, limit)
    a = 1.0 if alpha is None else alpha
    with np.errstate(over="ignore", invalid="ignore"):
        sigmoid = 1.0 / (1.0 + np.exp(-(a * g)))
        return g * sigmoid * (u + (0.0 if beta is None else beta))


def split_gate_up(x: torch.Tensor, layout: str = "halves") -> tuple[torch.Tensor, torch.Tensor]:
    """[..., 2I] -> (gate, up).

    "halves" (vLLM's silu_and_mul / the fused-MoE w13 output): gate = x[..., :I], up = x[..., I:].
    "interleaved" (gpt-oss style): gate = x[..., 0::2], up = x[..., 1::2]."""
    if x.shape[-1] % 2:
        raise ValueError("last dimension must be even (gate and up)")
    if layout == "halves":
        i = x.shape[-1] // 2
        return x[..., :i], x[..., i:]
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    raise ValueError(f"layout must be 'halves' or 'interleaved', got {layout!r}")


def swiglu_torch(x_gate_up: torch.Tensor, alpha: float | None = DSV4_SWIGLU_ALPHA,
                 limit: float | None = DSV4_SWIGLU_LIMIT, layout: str = "halves",
                 beta: float | None = None) -> torch.Tensor:
    """[T, 2I] -> [T, I] in x's dtype, computed in float32 (halves layout by default)."""
    gate, up = split_gate_up(x_gate_up, layout)
    gate, up = gate.float(), up.float()
    if _clamps(limit):
        gate = torch.clamp(gate, max=limit)
        up = torch.clamp(up, min=-limit, max=limit)
    if alpha is not None and alpha != 1.0:
        act = gate * torch.sigmoid(alpha * gate)
    else:
        act = torch.nn.functional.silu(gate)
    if beta:
        up = up + beta
    return (act * up).to(x_gate_up.dtype)
