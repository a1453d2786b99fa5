"""kernels/nvfp4/w4a4_expert.py: one expert of `fp4_fp4_mega_moe` (W4A4) emulated in torch against the float64
oracle of the same recipe, with stated bounds.

Bounds (measured on these seeds, 2026-12-03: emulation vs oracle 1.6e-3 .. 1.7e-3 relative Frobenius, the
final BF16 rounding of y; worst element 3.0e-3 of |y| + rms(y); W4A4 vs the unquantized-activation expert
0.156 .. 0.173, the two NVFP4 activation quantizations):
- emulation vs oracle: relative Frobenius error <= 4e-3 (about 2^-8), every element within
  2^-7 * (|y| + rms(y));
- oracle vs the ideal expert: <= 0.25 (what W4A4 costs; not a kernel property, a sanity bound);
- each wiring mistake (no SwiGLU clamp at limit 10, gate/up alphas swapped, a2 not folded back into the
  L2 alpha) moves the emulation >= 0.1 away from the oracle (measured >= 0.43).
Inputs: seeded N(0, 1) tokens, every fourth scaled by 8 (so ~4 % of the gate pre-activations pass the
limit), weights quantized from N(0, sigma) with gate sigma 4x up's (different global scales). CPU; on a
machine with CUDA the emulation also runs there (the lead's H200 run). The DeepSeek V4 Pro shape
(7168 / 3072) is `slow` (about 20 s, 1.9 GB)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels.nvfp4 import naive
from kernels.nvfp4 import w4a4_expert as W

SEEDS = [0, 1, 2, 3]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
LIMIT = 10.0  # DeepSeek V4's swiglu_limit


def make(seed: int, h: int = 256, i: int = 128, t: int = 64, sigma: float = 0.08):
    rng = np.random.default_rng(seed)

    def q(shape, s):
        return naive.quantize(rng.normal(0, s, size=shape))

    w1, w3, w2 = q((i, h), sigma), q((i, h), sigma / 4), q((h, i), sigma)
    x = rng.normal(0, 1, size=(t, h))
    x[::4] *= 8
    ex = W.Expert(*w1, *w3, *w2, a2=float(np.float32(0.7)))
    return torch.from_numpy(x).to(torch.bfloat16), ex


def _check(y: torch.Tensor, yo: np.ndarray) -> None:
    assert W.rel_err(y, yo) <= 4e-3
    d = np.abs(y.double().cpu().numpy() - yo)
    assert np.all(d <= 2.0 ** -7 * (np.abs(yo) + np.sqrt(np.mean(yo ** 2))))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", SEEDS)
def test_emulation_matches_the_float64_oracle_within_the_bound(seed, device):
    x, ex = make(seed)
    yo = W.expert_oracle(x.double().numpy(), ex, LIMIT)
    _check(W.expert_torch(x.to(device), ex, LIMIT), yo)
    gate = x.double().numpy() @ naive.dequantize(ex.w1, ex.w1_sf, ex.g1).T
    assert (gate > LIMIT).mean() > 0.01  # the clamp is exercised
    assert W.rel_err(torch.from_numpy(yo), W.expert_ideal(x.double().numpy(), ex, LIMIT)) <= 0.25


@pytest.mark.parametrize("mistake", ["no-clamp", "alphas-swapped", "a2-not-folded"])
def test_wiring_mistakes_leave_the_bound(mistake):
    x, ex = make(0)
    yo = W.expert_oracle(x.double().numpy(), ex, LIMIT)
    kw = {"no-clamp": dict(limit=None), "alphas-swapped": dict(swap_alphas=True), "a2-not-folded": dict(fold_a2=False)}
    args = {"limit": LIMIT, **kw[mistake]}
    assert W.rel_err(W.expert_torch(x, ex, **args), yo) >= 0.1


def test_activation_quantizer_is_the_oracles_exactly_on_edges():
    """vLLM's staging recipe in FP32 equals the float64 recipe bit for bit, on bf16 inputs with planted edges:
    an all-zero block (scale floored at 2^-9), a block past 6 * 448 (scale saturates at 448, values at 6),
    exact ties at every E2M1 midpoint, negative zero, and tiny blocks in UE4M3's subnormal range."""
    rng = np.random.default_rng(20261203)
    x = rng.normal(0, 1, size=(6, 64))
    x[0, :16] = 0.0
    x[1, :16] = np.linspace(-4000, 4000, 16)
    x[2, :16] = np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, 0])
    x[3, :16] = -0.0
    x[4, :16] = rng.normal(0, 1e-3, size=16)
    xb = torch.from_numpy(x).to(torch.bfloat16)
    got = W.quantize_fp32(xb.float()).double().numpy()
    want = W.quantize_f64(xb.double().numpy())
    np.testing.assert_array_equal(got, want)
    assert np.all(got[0, :16] == 0) and np.abs(got[1, :16]).max() == 6 * 448
    assert np.array_equal(got[2, 1:8], [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0])  # ties to the even code (sf = 1)


@pytest.mark.slow
def test_dsv4_pro_shape_one_expert():
    x, ex = make(5, h=7168, i=3072, t=8, sigma=0.02)
    yo = W.expert_oracle(x.double().numpy(), ex, LIMIT)
    _check(W.expert_torch(x.to(DEVICES[-1]), ex, LIMIT), yo)
    assert W.rel_err(torch.from_numpy(yo), W.expert_ideal(x.double().numpy(), ex, LIMIT)) <= 0.25


def test_fp8_shared_expert_dequantizes_to_bf16_exactly_with_power_of_two_scales():
    """The number behind fusing DSV4 Pro's FP8 shared expert into `fp4_fp4_mega_moe` (BF16 shared experts
    only): every E4M3 value times a power-of-two block scale (UE8M0) is a BF16 number, so the BF16 copy is
    exact; with arbitrary FP32 scales it is not (most products round, by up to 2^-8 relative)."""
    e4m3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    e4m3 = e4m3[torch.isfinite(e4m3)]
    for k in range(-40, 41):
        v = e4m3 * 2.0 ** k
        assert torch.equal(v.to(torch.bfloat16).float(), v), k
    scales = torch.rand(64, generator=torch.Generator().manual_seed(5)) + 0.5  # not powers of two
    v = (e4m3[None, :] * scales[:, None]).flatten()
    rounded = v.to(torch.bfloat16).float()
    inexact = (rounded != v).float().mean().item()
    assert inexact > 0.5
    nz = v != 0
    assert ((rounded - v).abs()[nz] / v.abs()[nz]).max().item() <= 2.0 ** -8  # half a BF16 ulp
