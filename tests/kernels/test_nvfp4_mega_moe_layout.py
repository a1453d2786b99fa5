"""kernels/nvfp4/mega_moe_layout.py: the ModelOpt NVFP4 -> `fp4_fp4_mega_moe` weight/scale transform.

The transformed tensors, read back through the kernel's layout, decode to exactly the checkpoint's values
under the float64 oracle (seeded random experts plus planted edges: all-zero blocks, +-6.0 at the largest
scale, subnormal UE4M3 scales, negative zero, distinct gate/up global scales); the vectorized transform is
bit-identical to the row-by-row reference; and each plausible wiring mistake (no gate/up interleave, no
UTCCP transpose, gate/up alphas swapped, global scale folded into the block scales) is caught.
CPU only. Seeds are printed in the test ids (re-run one with -k)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels.codecs import ue4m3_decode
from kernels.nvfp4 import mega_moe_layout as L
from kernels.nvfp4 import naive

SEEDS = [0, 1, 20261203]


def make_checkpoint(seed: int, e: int = 3, h: int = 256, i: int = 128) -> L.ExpertsCheckpoint:
    g = torch.Generator().manual_seed(seed)

    def codes(*shape):  # any E2M1 byte: +-0 ... +-6 in both nibbles
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)

    def scales(*shape):  # any positive UE4M3 code but NaN (0x7F): 0 (zero block), subnormals, ..., 448
        return torch.randint(0, 0x7F, shape, generator=g, dtype=torch.uint8)

    def gscale():
        return (torch.rand(e, generator=g, dtype=torch.float64) * 4 - 6).exp2().to(torch.float32) * 3

    ck = L.ExpertsCheckpoint(codes(e, i, h // 2), scales(e, i, h // 16), gscale(),
                             codes(e, i, h // 2), scales(e, i, h // 16), gscale(),
                             codes(e, h, i // 2), scales(e, h, i // 16), gscale(),
                             torch.rand(e, generator=g).to(torch.float32) + 0.01)
    if e < 3:
        return ck
    # planted edges
    ck.w1[0, 0, :8] = 0; ck.w1_sf[0, 0, 0] = 0            # an all-zero block
    ck.w1[0, 1, :8] = 0x77; ck.w1_sf[0, 1, 0] = 0x7E      # 6.0 everywhere at scale 448
    ck.w3[1, 2, :8] = 0xFF; ck.w3_sf[1, 2, 0] = 0x7E      # -6.0 at scale 448
    ck.w3_sf[1, 3, :8] = torch.arange(0, 8, dtype=torch.uint8)  # UE4M3 zero and all subnormals 2^-9 .. 7*2^-9
    ck.w2[2, 5, :] = 0x88                                 # negative zero everywhere in a row
    ck.w2_sf[2, 6, :] = 0x01                              # smallest subnormal scale over a whole row
    ck.w1_gs[2] = 2.0 ** -20                              # tiny global scale
    ck.w3_gs[2] = 1000.0                                  # and a large one on the same expert
    return ck


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical float64 arrays (so -0.0 != +0.0)."""
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def test_the_oracle_decodes_from_the_format_tables():
    """The oracle's E2M1 and UE4M3 decoders against the format's own definition, every code."""
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    got = naive.unpack_e2m1(np.arange(256, dtype=np.uint8))
    want = np.array([s * grid[c & 7] * 1.0 for b in range(256) for c, s in
                     ((b & 0xF, -1.0 if b & 0x8 else 1.0), (b >> 4, -1.0 if b & 0x80 else 1.0))])
    assert _same(got, want)  # bit-identical: the negative zeros (0x8 nibbles) included
    assert np.signbit(got[0x08 * 2]) and np.signbit(got[0x80 * 2 + 1]) and got[0x08 * 2] == 0
    for c in range(0x7F):
        e, m = c >> 3, c & 7
        v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        assert ue4m3_decode(np.array([c], dtype=np.uint8))[0] == v, c
    assert ue4m3_decode(np.array([0x7E], dtype=np.uint8))[0] == 448.0


@pytest.mark.parametrize("seed", SEEDS)
def test_transformed_tensors_decode_to_the_checkpoint_values_exactly(seed):
    ck = make_checkpoint(seed)
    kw = L.transform(ck)
    w1, w3, w2 = L.checkpoint_values(ck)
    gate, up = L.decode_l1(kw, ck.w1.shape[1])
    assert _same(gate, w1) and _same(up, w3) and _same(L.decode_l2(kw), w2)
    # the planted edges are really there
    assert np.all(w1[0, 0, :16] == 0) and np.all(w1[0, 1, :16] == 6.0 * 448 * float(ck.w1_gs[0]))
    assert np.signbit(w2[2, 5]).all() and (w2[2, 5] == 0).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_vectorized_transform_is_the_reference_bit_for_bit(seed):
    ck = make_checkpoint(seed)
    a, b = L.transform(ck), L.reference_transform(ck)
    for x, y in ((a.l1_weights[0], b.l1_weights[0]), (a.l1_weights[1], b.l1_weights[1]),
                 (a.l2_weights[0], b.l2_weights[0]), (a.l2_weights[1], b.l2_weights[1]),
                 (a.l1_alphas, b.l1_alphas), (a.l2_alphas, b.l2_alphas), (a.a2_scales, b.a2_scales)):
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x.contiguous(), y.contiguous())


def test_kernel_dtypes_shapes_and_mn_major_scales():
    e, h, i = 3, 256, 128
    kw = L.transform(make_checkpoint(7, e, h, i))
    assert kw.l1_weights[0].dtype == kw.l2_weights[0].dtype == torch.int8
    assert kw.l1_weights[0].shape == (e, 2 * i, h // 2) and kw.l2_weights[0].shape == (e, h, i // 2)
    assert kw.l1_weights[1].dtype == kw.l2_weights[1].dtype == torch.int32
    assert kw.l1_weights[1].shape == (e, 2 * i, h // 64) and kw.l2_weights[1].shape == (e, h, i // 64)
    assert kw.l1_weights[1].stride(-2) == 1 and kw.l2_weights[1].stride(-2) == 1  # MN-major for the TMA loads
    assert kw.l1_alphas.shape == (e, 2) and kw.l1_alphas.dtype == torch.float32
    assert kw.l2_alphas.shape == kw.a2_scales.shape == (e,)


def test_dsv4_pro_shapes_one_expert():
    """hidden 7168, intermediate 3072: the transform fits the kernel's constraints and equals the reference."""
    ck = make_checkpoint(3, e=1, h=7168, i=3072)
    assert L.check_shapes(ck) == (1, 7168, 3072)
    a, b = L.transform(ck), L.reference_transform(ck)
    assert torch.equal(a.l1_weights[0], b.l1_weights[0]) and torch.equal(a.l1_weights[1].contiguous(), b.l1_weights[1])
    assert torch.equal(a.l2_weights[1].contiguous(), b.l2_weights[1])


def test_shapes_that_do_not_fit_are_refused_naming_the_tensor():
    ck = make_checkpoint(0)
    ck.w3_sf = ck.w3_sf[:, :, :-1]
    with pytest.raises(ValueError, match="w3_sf"):
        L.transform(ck)
    with pytest.raises(ValueError, match="multiples of 128"):
        L.transform(make_checkpoint(0, e=1, h=192, i=96))


# ---------------------------------------------------------------- each wiring mistake is caught
def _decodes_right(kw: L.KernelWeights, want: tuple, intermediate: int) -> bool:
    w1, w3, w2 = want
    gate, up = L.decode_l1(kw, intermediate)
    return _same(gate, w1) and _same(up, w3) and _same(L.decode_l2(kw), w2)


@pytest.mark.parametrize("mistake", ["none", "no-interleave", "no-utccp", "alphas-swapped", "gs-folded",
                                     "sf-not-packed-le"])
def test_a_wrong_transform_does_not_decode_to_the_checkpoint(mistake, monkeypatch):
    ck = make_checkpoint(11)
    ck.w3_gs[2] = 0.25  # every global scale <= 0.75 here: the fold below stays under 448
    want = L.checkpoint_values(ck)
    if mistake == "no-interleave":
        monkeypatch.setattr(L, "_interleave", lambda t, gran=8: t.clone())
    elif mistake == "no-utccp":
        monkeypatch.setattr(L, "_utccp", lambda sf: sf.clone())
    elif mistake == "sf-not-packed-le":  # big-endian packing: byte 0 of a word is block 4w+3
        monkeypatch.setattr(L, "_pack_sf", lambda sf: L._u8(sf).contiguous().reshape(*sf.shape[:-1], -1, 4)
                            .flip(-1).contiguous().view(torch.int32).squeeze(-1))
    elif mistake == "gs-folded":  # the field fork's fold: UE4M3 * FP32 -> UE4M3, alphas 1
        for name, gs in (("w1_sf", ck.w1_gs), ("w3_sf", ck.w3_gs)):
            sf = L._u8(getattr(ck, name)).numpy()
            setattr(ck, name, torch.from_numpy(np.stack([naive.fold_global_scale(sf[x], float(gs[x]))
                                                         for x in range(sf.shape[0])])))
        ck.w1_gs = torch.ones_like(ck.w1_gs)
        ck.w3_gs = torch.ones_like(ck.w3_gs)
    kw = L.transform(ck)
    if mistake == "alphas-swapped":
        kw.l1_alphas = kw.l1_alphas.flip(1).contiguous()
    assert _decodes_right(kw, want, ck.w1.shape[1]) == (mistake == "none")
