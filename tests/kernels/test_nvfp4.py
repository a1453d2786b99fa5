"""kernels/nvfp4/naive.py: the NVFP4 float64 oracles (no DeepGEMM tree needed; CPU).

Deterministic: seeded inputs, Hypothesis derandomized; the FP32 rounding of the global scale is
checked with scales that are not float32 numbers, chosen where that rounding changes the result."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.codecs import e4m3_decode, ue4m3_decode
from kernels.nvfp4 import naive

E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def test_e2m1_byte_order_low_nibble_first():
    # 0x21: low nibble 1 -> 0.5 is element 0, high nibble 2 -> 1.0 is element 1; 0xF8 -> -0.0, -6
    np.testing.assert_array_equal(naive.unpack_e2m1(np.array([0x21, 0xF8], dtype=np.uint8)),
                                  [0.5, 1.0, -0.0, -6.0])
    assert naive.pack_e2m1([0.5, 1.0]).tolist() == [0x21]


def test_e2m1_pack_roundtrip_all_bytes():
    allb = np.arange(256, dtype=np.uint8)
    vals = naive.unpack_e2m1(allb)
    np.testing.assert_array_equal(naive.pack_e2m1(vals), allb)


@pytest.mark.parametrize("k", [2, 16, 30, 64, 1026])
def test_dequantize_formula(k):
    rng = np.random.default_rng(k)
    packed = rng.integers(0, 256, size=(3, k // 2), dtype=np.uint8)
    sf = rng.integers(0, 0x7F, size=(3, -(-k // 16)), dtype=np.uint8)
    g = 0.0123
    got = naive.dequantize(packed, sf, g)
    vals = naive.unpack_e2m1(packed)
    for i in range(3):
        for j in range(k):
            assert got[i, j] == vals[i, j] * ue4m3_decode(sf[i, j // 16]) * np.float64(np.float32(g))


def test_dequantize_rejects_wrong_scale_count_and_negative_scale():
    with pytest.raises(ValueError):
        naive.dequantize(np.zeros((1, 8), np.uint8), np.zeros((1, 2), np.uint8), 1.0)
    with pytest.raises(ValueError):
        naive.dequantize(np.zeros((1, 8), np.uint8), np.array([[0x88]], np.uint8), 1.0)


@pytest.mark.parametrize("shape", [(1, 16), (4, 64), (3, 34), (2, 1024)])
@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3, 1e30])
def test_quantize_error_bound(shape, scale):
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal(shape) * scale
    packed, sf, g = naive.quantize(x)
    y = naive.dequantize(packed, sf, g)
    blocks = np.pad(np.abs(x), [(0, 0), (0, -shape[1] % 16)]).reshape(shape[0], -1, 16).max(-1)
    # E2M1 half-step (<= 1 at magnitude 6 => 1/6 of amax) plus UE4M3 scale rounding (2^-4 relative)
    bound = np.repeat(blocks, 16, axis=-1)[:, : shape[1]] * (1 / 6 + 2**-4) * 1.01 + 1e-300
    assert np.all(np.abs(y - x) <= bound)


def test_quantize_edges():
    z = np.zeros((2, 32))
    packed, sf, g = naive.quantize(z)
    assert not packed.any() and not sf.any() and naive.dequantize(packed, sf, g).tolist() == z.tolist()
    assert g == 1.0  # an all-zero tensor gets global scale 1
    assert naive.quantize(np.zeros((2, 0)))[2] == 1.0  # and so does an empty one
    with pytest.raises(ValueError, match="NaN input"):
        naive.quantize(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="K must be even"):
        naive.quantize(np.ones((1, 3)))
    # values exactly on the grid with scale 1 come back exactly
    x = np.array([np.tile(np.concatenate([E2M1_GRID, -E2M1_GRID]), 2)])
    packed, sf, g = naive.quantize(x, global_scale=1.0)
    np.testing.assert_array_equal(naive.dequantize(packed, sf, g), x)
    # small block next to a big one: each block keeps its own scale (amax ratio 1e3 fits UE4M3's range)
    x = np.concatenate([np.full(16, 1.0), np.full(16, 1e3)])[None]
    packed, sf, g = naive.quantize(x)
    y = naive.dequantize(packed, sf, g)
    assert np.all(np.abs(y[0, :16] - 1.0) <= 1.0 * (1 / 6 + 2**-4))
    # ratio 1e6 is beyond UE4M3 (2^-9 .. 448): that block's scale flushes to 0 under this recipe
    x = np.concatenate([np.full(16, 1e-3), np.full(16, 1e3)])[None]
    packed, sf, g = naive.quantize(x)
    assert sf[0, 0] == 0 and not naive.dequantize(packed, sf, g)[0, :16].any()
    assert not packed[0, :8].any()  # a flushed block's codes are 0 too
    # ... also where its raw values would have codes of their own (0.5 is E2M1 code 1): with a
    # global scale of 100, 0.5 / 6 / 100 is below half the smallest UE4M3 (2^-10), so the scale is 0
    x = np.concatenate([np.full(16, 0.5), np.full(16, 1e5)])[None]
    packed, sf, g = naive.quantize(x, global_scale=100.0)
    assert sf[0, 0] == 0 and not packed[0, :8].any()


@given(st.lists(st.integers(0, 0x7E), min_size=1, max_size=40))
@settings(max_examples=200, deadline=None, derandomize=True, database=None)
def test_sf_int32_pack_roundtrip(codes):
    c = np.array(codes, dtype=np.uint8)
    p = naive.pack_sf_int32(c)
    assert p.dtype == np.int32 and p.shape == (-(-len(codes) // 4),)
    np.testing.assert_array_equal(naive.unpack_sf_int32(p, len(codes)), c)
    for i, code in enumerate(codes):  # byte i % 4 of word i // 4, least significant first
        assert (int(p[i // 4]) >> (8 * (i % 4))) & 0xFF == code
    assert (naive.unpack_sf_int32(p, len(p) * 4)[len(codes):] == 0).all()  # zero-scale padding


def test_sf_int32_pack_batched_rows():
    """[rows, nb] scales pack row by row (the layout is per row of the scale tensor)."""
    c = np.arange(2 * 6, dtype=np.uint8).reshape(2, 6) + 0x30
    p = naive.pack_sf_int32(c)
    assert p.shape == (2, 2)
    assert p.view(np.uint32)[1, 0] == 0x39383736 and p.view(np.uint32)[1, 1] == 0x3B3A
    np.testing.assert_array_equal(naive.unpack_sf_int32(p, 6), c)


def test_sf_pack_refuses_signed_scale():
    with pytest.raises(ValueError):
        naive.pack_sf_int32(np.array([0x38, 0x80], np.uint8))


@given(st.integers(0, 0x7E), st.floats(1e-8, 10.0, allow_nan=False))
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
def test_fold_global_scale_single_rounding(code, g):
    g32 = float(np.float32(g))
    prod = ue4m3_decode(np.uint8(code)) * g32
    if prod > 448:
        with pytest.raises(ValueError):
            naive.fold_global_scale(np.array([code], np.uint8), g32)
        return
    out = naive.fold_global_scale(np.array([code], np.uint8), g32)[0]
    grid = e4m3_decode(np.arange(0x7F, dtype=np.uint8))
    d = np.abs(grid - prod)
    best = np.flatnonzero(d == d.min())
    assert out in best  # nearest UE4M3 (ties: either neighbour is nearest; codecs picks the even one)
    if len(best) == 2:
        assert out % 2 == 0


def test_fold_global_scale_refuses_bad_input():
    for g in (np.nan, np.inf, -1.0):
        with pytest.raises(ValueError, match="global scale must be"):
            naive.fold_global_scale(np.array([0x38], np.uint8), g)


def test_tmem_4x_coords_distinct_and_dense():
    for mn, bk in ((128, 64), (256, 256)):
        cells = {naive.tmem_4x_coords(r, kb, mn) for r in range(mn) for kb in range(bk // 16)}
        assert len(cells) == mn * bk // 16
        assert max(c[1] for c in cells) + 1 == naive.tmem_4x_num_cols(mn, bk)
        assert {c[0] for c in cells} == set(range(32)) and {c[2] for c in cells} == {0, 1, 2, 3}
    assert naive.tmem_4x_coords(200, 5, 256) == (200 % 32, 8 + 4 + 2, 1)
    with pytest.raises(ValueError):
        naive.tmem_4x_coords(128, 0, 128)


# ------------------------------------------------------------------ the FP32 global scale

G_TIE = 1.0625 + 2.0**-40  # float64 just above a UE4M3 tie; float32 rounds it onto the tie (1.0625)


def test_global_scale_is_rounded_to_float32_everywhere():
    """The global scale is an FP32 number in the format: a float64 one is rounded to float32 first.
    G_TIE shows it: times code 0x38 (1.0) the exact product lies above the tie between 1.0 and
    1.125 (-> 1.125), the float32 product is the tie itself (-> 1.0, the even code)."""
    assert np.float32(G_TIE) == 1.0625 and G_TIE != 1.0625
    assert naive.fold_global_scale(np.array([0x38], np.uint8), G_TIE).tolist() == [0x38]
    assert naive.fold_global_scale(np.array([0x38], np.uint8), 1.0625 + 2.0**-20).tolist() == [0x39]
    packed = naive.pack_e2m1([1.0, -6.0])
    sf = np.array([0x38], np.uint8)
    np.testing.assert_array_equal(naive.dequantize(packed, sf, 0.1), [np.float32(0.1), -6 * np.float64(np.float32(0.1))])
    _, _, g = naive.quantize(np.ones((1, 16)), global_scale=0.1)
    assert g == float(np.float32(0.1)) and g != 0.1


def test_quantize_default_global_scale_is_float32_amax_over_2688():
    x = np.zeros((1, 32))
    x[0, 5] = 1000.0  # 1000 / 2688 is not a float32 number
    x[0, 20] = -3.0
    packed, sf, g = naive.quantize(x)
    assert g == float(np.float32(1000.0 / 2688.0)) and np.float32(g) == g
    # the block holding the amax gets the largest scale that keeps 6 * scale * g >= amax: 448 here
    assert sf[0, 0] == 0x7E  # 1000 / 6 / g = 448 exactly: the largest UE4M3
    y = naive.dequantize(packed, sf, g)
    assert abs(y[0, 5] - 1000.0) <= 1000.0 * (1 / 6 + 2**-4)


def test_quantize_refuses_non_positive_or_non_finite_global_scale():
    for g in (0.0, -1.0, np.inf, np.nan, 1e-50):  # 1e-50 rounds to float32 zero
        with pytest.raises(ValueError, match="global scale"):
            naive.quantize(np.ones((1, 16)), global_scale=g)


def test_fold_global_scale_edges():
    """Zero scale and zero global scale fold to 0; a product of exactly 448 is allowed, above it
    refused; below 2^-10 (half the smallest subnormal 2^-9) the product flushes to 0."""
    codes = np.array([0x00, 0x7E, 0x01, 0x38], np.uint8)
    assert naive.fold_global_scale(codes, 0.0).tolist() == [0, 0, 0, 0]
    assert naive.fold_global_scale(np.array([0x7E], np.uint8), 1.0).tolist() == [0x7E]
    with pytest.raises(ValueError, match="above 448"):
        naive.fold_global_scale(np.array([0x7E], np.uint8), 1.0 + 2.0**-20)
    assert naive.fold_global_scale(np.array([0x01], np.uint8), 0.5).tolist() == [0x00]  # tie -> even
    assert naive.fold_global_scale(np.array([0x01], np.uint8), 0.75).tolist() == [0x01]
    with pytest.raises(ValueError, match="NaN block scale"):
        naive.fold_global_scale(np.array([0x7F], np.uint8), 1.0)
