"""Eager PyTorch o FP8 QDQ: the straightforward formulation of the arithmetic (docs/background.md;
what the benchmark calls "eager" and hands to torch.compile).

`o_fp8_qdq_torch(o, block, emulate)` returns a new tensor; `o_fp8_qdq_torch_` writes into `o`.
emulate=False uses torch's float8_e4m3fn cast for the rounding (RNE; the clamp keeps it finite);
emulate=True rounds onto the e4m3 grid with fp32 arithmetic (frexp/ldexp, torch.round = half to
even), signed zero kept.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0
FP8_MAX_INV = torch.tensor(1.0 / 448.0, dtype=torch.float32).item()  # float32(1/448) as a Python float
AMAX_FLOOR = torch.tensor(1e-4, dtype=torch.float32).item()          # float32(1e-4)


def _ceil_log2(r: torch.Tensor) -> torch.Tensor:
    bits = r.view(torch.int32)
    return ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def e4m3_round_emulated(y: torch.Tensor) -> torch.Tensor:
    """fp32 y with |y| <= 448 -> y rounded to the e4m3 grid (RNE), in fp32, signed zero kept."""
    _, exp = torch.frexp(y)  # y = m * 2^exp, 0.5 <= |m| < 1; exp = floor(log2|y|) + 1
    e = torch.clamp(exp - 1, min=-6)  # normal: quantum 2^(e-3); subnormal: 2^-9
    step_exp = e - 3
    k = torch.round(torch.ldexp(y, -step_exp))  # exact scaling; torch.round is half to even
    return torch.copysign(torch.ldexp(k, step_exp), y)


def o_fp8_qdq_torch(o: torch.Tensor, block: int = 32, emulate: bool = False) -> torch.Tensor:
    T, G, D = o.shape
    x = o.float().reshape(T, G, D // block, block)
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(AMAX_FLOOR)
    s = ((_ceil_log2(amax * FP8_MAX_INV) + 127) << 23).view(torch.float32)  # 2^e, exactly
    y = (x / s).clamp(-FP8_MAX, FP8_MAX)
    if emulate:
        q = e4m3_round_emulated(y)
    else:
        q = y.to(torch.float8_e4m3fn).float()
    return (q * s).to(o.dtype).reshape(T, G, D)


def o_fp8_qdq_torch_(o: torch.Tensor, block: int = 32, emulate: bool = False) -> torch.Tensor:
    o.copy_(o_fp8_qdq_torch(o, block, emulate))
    return o
