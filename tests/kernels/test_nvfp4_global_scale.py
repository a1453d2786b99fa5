"""NVFP4's FP32 global scale belongs in the epilogue (an FP32 alpha), not folded into the UE4M3 block scales.

`value = e2m1 * ue4m3_block_scale * fp32_global_scale`. Against the float64 NVFP4 oracle
(kernels/nvfp4/naive.py) on seeded N(0, sigma) weights, 64 x 7168 (one DeepSeek V4 expert row block):
- the FP32 alpha path (e2m1 * block scale, exact in FP32, then one FP32 multiply by the global scale: what
  DeepGEMM 2.8.1's NVFP4 MegaMoE epilogue does with its per-expert alphas) matches to FP32 rounding;
- folding the global scale into the block scales (one more UE4M3 rounding, what a B200 fork did to fit a
  kernel without an alpha) pushes small scales into UE4M3's subnormal range and to zero: whole blocks vanish
  for small weights, and the error grows for moderate ones."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.nvfp4 import naive

ROWS, K = 64, 7168


def _weights(sigma: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, sigma, size=(ROWS, K))


def _alpha_path(packed, sf, g) -> np.ndarray:
    """What an FP32 epilogue computes: e2m1 * UE4M3 (exact in FP32), then one FP32 multiply by alpha."""
    vals = naive.unpack_e2m1(packed).astype(np.float32)
    scales = np.repeat(naive.ue4m3_decode(sf).astype(np.float32), naive.BLOCK, axis=-1)[..., : vals.shape[-1]]
    return (vals * scales) * np.float32(g)


def _fold_path(packed, sf, g) -> np.ndarray:
    return naive.dequantize(packed, naive.fold_global_scale(sf, g), 1.0)


def _rel_err(got, x) -> float:
    return float(np.linalg.norm(got - x) / np.linalg.norm(x))


@pytest.mark.parametrize("sigma,seed", [(0.004, 1), (0.02, 2), (1.0, 3)])
def test_global_scale_as_fp32_alpha_matches_the_oracle(sigma, seed):
    packed, sf, g = naive.quantize(_weights(sigma, seed))
    oracle = naive.dequantize(packed, sf, g)
    got = _alpha_path(packed, sf, g).astype(np.float64)
    # one FP32 rounding of each product: relative error <= 2^-24, plus the float32 rounding of g itself,
    # which the oracle shares (it also uses float32(g))
    nz = oracle != 0
    assert np.all(got[~nz] == 0)
    assert np.max(np.abs(got[nz] - oracle[nz]) / np.abs(oracle[nz])) <= 2.0 ** -23


def test_alpha_path_keeps_the_planted_edges():
    """Planted blocks: all zero (scale code 0), the tensor's amax (scale 448, the UE4M3 top), and one
    whose scale is UE4M3-subnormal (2^-8: the range a fold falls into); the alpha path matches the oracle
    on each."""
    x = _weights(0.02, 4)
    top = float(np.max(np.abs(x))) * 1.5
    g = float(np.float32(top / (448.0 * 6.0)))
    x[0, :16] = 0.0
    x[1, :16], x[1, 0] = 0.0, top
    x[2, :16], x[2, 0] = 0.0, 6.0 * g * 2.0 ** -8
    packed, sf, g_got = naive.quantize(x)
    assert g_got == g
    decoded = naive.ue4m3_decode(sf)
    assert decoded[0, 0] == 0 and decoded[1, 0] == 448.0 and decoded[2, 0] == 2.0 ** -8
    oracle = naive.dequantize(packed, sf, g_got)
    got = _alpha_path(packed, sf, g_got).astype(np.float64)
    assert np.all(got[0, :16] == 0) and np.all(oracle[0, :16] == 0)
    assert got[2, 0] != 0
    nz = oracle != 0
    assert np.max(np.abs(got[nz] - oracle[nz]) / np.abs(oracle[nz])) <= 2.0 ** -23


def test_fold_zeroes_blocks_the_alpha_path_keeps():
    packed, sf, g = naive.quantize(x := _weights(0.004, 1))
    folded = naive.fold_global_scale(sf, g)
    zeroed = float(np.mean((folded == 0) & (sf != 0)))
    assert zeroed > 0.05, zeroed                                       # measured: 11 % of the blocks
    assert not np.any((naive.ue4m3_decode(sf) == 0) & (sf != 0))       # the alpha path keeps every block
    assert _rel_err(_fold_path(packed, sf, g), x) > 1.5 * _rel_err(_alpha_path(packed, sf, g), x)


def test_fold_adds_error_even_when_no_block_vanishes():
    packed, sf, g = naive.quantize(x := _weights(0.02, 2))
    alpha_err, fold_err = _rel_err(_alpha_path(packed, sf, g), x), _rel_err(_fold_path(packed, sf, g), x)
    assert fold_err > 1.03 * alpha_err, (fold_err, alpha_err)          # measured: about +8 %
