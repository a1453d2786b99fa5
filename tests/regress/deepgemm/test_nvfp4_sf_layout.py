"""Patch "Support block-16 UE4M3 scale factors for NVFP4": the torch helpers of the patched tree
(deep_gemm/utils/nvfp4.py, loaded standalone: no _C build needed) against the float64 oracles in
kernels/nvfp4/naive.py. Needs the patched tree (dsv4_tree, skips when unreachable)."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernels.nvfp4 import naive  # noqa: E402


@pytest.fixture(scope="module")
def dg(dsv4_tree):
    path = dsv4_tree("deepgemm") / "deep_gemm" / "utils" / "nvfp4.py"
    spec = importlib.util.spec_from_file_location("dsv4_patched_deep_gemm_nvfp4", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rand_codes(rng, shape):
    codes = rng.integers(0, 0x7F, size=shape, dtype=np.uint8)  # every UE4M3 but NaN (0x7F)
    return codes


def _edge_codes():
    # zero, smallest subnormal, largest subnormal, smallest normal, 1.0, max (448)
    return np.array([0x00, 0x01, 0x07, 0x08, 0x38, 0x7E], dtype=np.uint8)


@pytest.mark.parametrize("shape", [(1, 1), (3, 4), (5, 7), (2, 3, 9), (128, 16), (7, 1025)])
def test_pack_ue4m3_matches_reference(dg, shape):
    rng = np.random.default_rng(sum(shape))
    codes = _rand_codes(rng, shape)
    codes.reshape(-1)[: len(_edge_codes())] = _edge_codes()[: codes.size]
    sf = torch.from_numpy(codes).view(torch.float8_e4m3fn)
    packed = dg.pack_ue4m3_to_int(sf)
    assert packed.dtype == torch.int32
    np.testing.assert_array_equal(packed.numpy(), naive.pack_sf_int32(codes))
    back = dg.unpack_ue4m3_from_int(packed, shape[-1])
    np.testing.assert_array_equal(back.view(torch.uint8).numpy(), codes)


@pytest.mark.parametrize("bad", [0x80, 0xFF, 0x7F, 0xB8])
def test_pack_rejects_negative_and_nan(dg, bad):
    codes = np.array([[0x38, bad, 0x10]], dtype=np.uint8)
    with pytest.raises(AssertionError):
        dg.pack_ue4m3_to_int(torch.from_numpy(codes).view(torch.float8_e4m3fn))


@pytest.mark.parametrize("g", [1.0, 0.5, 3.0e-4, 1.7e-6, 2.0**-12, 0.0, 0.8, 1.0 / 2688.0])
def test_fold_global_scale_matches_reference(dg, g):
    rng = np.random.default_rng(int(g * 1e6) + 1)
    codes = np.concatenate([_rand_codes(rng, (517,)), _edge_codes()])
    g32 = float(np.float32(g))
    prod_ok = naive.ue4m3_decode(codes) * g32 <= 448.0
    codes = codes[prod_ok]
    got = dg.fold_global_scale(torch.from_numpy(codes).view(torch.float8_e4m3fn), g32)
    np.testing.assert_array_equal(got.view(torch.uint8).numpy(), naive.fold_global_scale(codes, g32))


def test_fold_global_scale_refuses_overflow_and_bad_scales(dg):
    sf = torch.tensor([448.0, 1.0]).to(torch.float8_e4m3fn)
    with pytest.raises(AssertionError):
        dg.fold_global_scale(sf, 2.0)
    for g in (float("nan"), float("inf"), -1.0):
        with pytest.raises(AssertionError):
            dg.fold_global_scale(sf, g)


@pytest.mark.parametrize("sf_block_mn,block_k", [(128, 64), (128, 256), (256, 256), (384, 128)])
def test_tmem_4x_layout_matches_reference(dg, sf_block_mn, block_k):
    lane, col, byte = dg.get_nvfp4_sf_tmem_coords(sf_block_mn, block_k)
    assert lane.shape == (sf_block_mn, block_k // 16)
    for r in range(sf_block_mn):
        for kb in range(block_k // 16):
            assert (lane[r, kb].item(), col[r, kb].item(), byte[r, kb].item()) == naive.tmem_4x_coords(r, kb, sf_block_mn)
    ncols = dg.get_num_nvfp4_sf_tmem_cols(sf_block_mn, block_k)
    assert ncols == naive.tmem_4x_num_cols(sf_block_mn, block_k) == col.max().item() + 1
    # every (lane, column, byte) cell is used exactly once: no two scales collide
    cells = set(zip(lane.flatten().tolist(), col.flatten().tolist(), byte.flatten().tolist()))
    assert len(cells) == sf_block_mn * block_k // 16
    # 4X needs (block_k / 64)x the columns of one shared 1X group
    assert ncols == naive.tmem_1x_num_cols(sf_block_mn) * (block_k // 64)


def test_no_ue8m0_conversion_or_block_merge(dsv4_tree):
    """The seed's hard rule, on the patched sources: block-16 scales stay UE4M3."""
    tree = dsv4_tree("deepgemm")
    py = (tree / "deep_gemm/utils/nvfp4.py").read_text()
    code = "\n".join(ln for ln in py.splitlines() if not ln.lstrip().startswith("#"))
    code = re.sub(r'""".*?"""', "", code, flags=re.S)
    assert "ue8m0" not in code.lower() and ">> 23" not in code and "<< 23" not in code
    layout = (tree / "csrc/apis/layout.hpp").read_text()
    nvfp4_branch = layout.split("NVFP4 block-16 scales are UE4M3", 1)[1].split("DG_HOST_UNREACHABLE", 1)[0]
    assert "DG_HOST_ASSERT(gran_k != 16 or sf.scalar_type() != torch::kFloat);" in nvfp4_branch
    assert "get_mn_major_tma_aligned_packed_ue4m3_tensor" in nvfp4_branch
    assert "ue8m0" not in nvfp4_branch.replace("UE8M0", "")
    smxx = (tree / "csrc/jit_kernels/impls/smxx_layout.hpp").read_text()
    fn = smxx.split("get_mn_major_tma_aligned_packed_ue4m3_tensor(const torch::Tensor& sf) {", 1)[1].split("\n}\n", 1)[0]
    assert "bitwise_right_shift(23)" not in fn and "ue8m0" not in fn.lower()
