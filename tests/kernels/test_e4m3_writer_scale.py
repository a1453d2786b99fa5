"""fp8_ds_mla writer oracle (kernels/fp8_ds_mla/naive.py): the UE8M0 scale exponent on float32
inputs next to powers of two, where ceil(log2f(s)) and the exact ceil differ.

s = float32(amax / 448). For amax = 448 * 2^k * (1 + 2^-23) (one float32 ulp above), s is 2^k one ulp
up, and the scale must be 2^(k+1); log2f(s) = k + 1.7e-7 rounds to k in float32, so a writer that
takes ceil(log2f(s)) stores 2^k and the code clamps. At 448 * 2^k exactly and one ulp below, the scale
is 2^k. The expected byte is computed here with Python integers (math.frexp of the exact double),
independent of the oracle's torch.frexp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kernels.fp8_ds_mla import layout as L
from kernels.fp8_ds_mla.naive import quantize_nope

KS = (-60, -20, -9, -2, -1, 0, 1, 2, 7, 20, 60)
SEED = 2727


def _exact_scale_byte(amax: np.float32) -> int:
    s = max(float(np.float32(amax) / np.float32(448.0)), 2.0**-126)  # float32 division, then FLT_MIN
    m, e = math.frexp(s)  # s = m * 2^e, 0.5 <= m < 1: ceil(log2 s) = e - 1 when m == 0.5
    return (e - 1 if m == 0.5 else e) + 127


def _rows(seed: int = SEED) -> torch.Tensor:
    """float32 NoPE rows [len(KS) * 3, 448]: tile j of each row has amax next to 448 * 2^(k + j)."""
    gen = np.random.default_rng(seed)
    rows = []
    for k in KS:
        for ulp in (1, 0, -1):
            row = np.zeros((L.NUM_TILES, L.TILE), dtype=np.float32)
            for j in range(L.NUM_TILES):
                top = np.float32(448.0 * 2.0 ** (k + j))
                top = {1: np.nextafter(top, np.float32(np.inf)), 0: top,
                       -1: np.nextafter(top, np.float32(0))}[ulp]
                rest = gen.uniform(-1, 1, L.TILE - 1).astype(np.float32) * top
                row[j] = np.concatenate([[top if j % 2 else -top], rest])
            rows.append(row.reshape(-1))
    return torch.from_numpy(np.stack(rows))


def test_scale_bytes_next_to_powers_of_two_are_the_exact_ceil():
    x = _rows()
    codes, scales = quantize_nope(x)
    amax = x.reshape(-1, L.NUM_TILES, L.TILE).abs().amax(dim=-1).numpy()
    want = np.vectorize(_exact_scale_byte)(amax).astype(np.uint8)
    # the planted tiles are what the docstring says: +1 ulp tiles need 2^(k+1)
    assert want[0, 0] == 127 + KS[0] + 1 and want[1, 0] == 127 + KS[0] and want[2, 0] == 127 + KS[0]
    bad = np.argwhere(scales.numpy() != want)
    assert not len(bad), (f"seed {SEED}: {len(bad)} scale bytes differ; first at row {bad[0][0]} tile "
                          f"{bad[0][1]}: amax {amax[tuple(bad[0])]!r}, got {scales.numpy()[tuple(bad[0])]}, "
                          f"want {want[tuple(bad[0])]}")
    # and the codes: amax maps to +-448 at most (never clamped from above 448 * (1 + 2^-23))
    scale = np.ldexp(1.0, want.astype(np.int64) - 127)
    top = (amax / scale).max()
    assert top <= 448.0, top


@pytest.mark.parametrize("k", [-1, 0, 20])
def test_one_ulp_above_448_times_a_power_of_two_takes_the_next_scale(k):
    """Hand value: amax = nextafter(448 * 2^k) -> byte 127 + k + 1, amax = 448 * 2^k -> 127 + k."""
    x = torch.zeros(2, L.NOPE_DIM, dtype=torch.float32)
    top = np.float32(448.0 * 2.0**k)
    x[0, 0] = float(np.nextafter(top, np.float32(np.inf)))
    x[1, 0] = float(top)
    _, scales = quantize_nope(x)
    assert scales[0, 0].item() == 127 + k + 1 and scales[1, 0].item() == 127 + k
