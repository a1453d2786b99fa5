"""NVFP4 scale factors: UE4M3 over 16 values, the FP32 global scale kept out of them.

- test_global_scale_as_fp32_alpha_*: why the stack does not fold the per-tensor FP32 global scale into the
  UE4M3 block scales: against the float64 NVFP4 oracle (kernels/nvfp4/naive.py) on seeded N(0, s)
  weights, the FP32 alpha path (e2m1 * block_scale accumulated in FP32, times alpha = g in FP32) matches
  to FP32 rounding, the fold zeroes whole blocks and multiplies the error. No tree needed.
- test_tree_*: the patched tree (dsv4_tree): its in-tree reference packing (DeepGEMM's tests/test_layout.py)
  against the oracle's packing, and the host layout API's handling of UE4M3 block-16 scales.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from kernels.nvfp4 import naive

torch = pytest.importorskip("torch")

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


@pytest.mark.parametrize("sigma,seed", [(0.004, 1), (0.02, 2), (1.0, 3)])
def test_global_scale_as_fp32_alpha_matches_the_oracle(sigma, seed):
    x = _weights(sigma, seed)
    packed, sf, g = naive.quantize(x)
    oracle = naive.dequantize(packed, sf, g)
    got = _alpha_path(packed, sf, g).astype(np.float64)
    # one FP32 rounding of each product: relative error <= 2^-24 (plus the float32 rounding of g itself,
    # which the oracle shares: it also uses float32(g))
    nz = oracle != 0
    assert np.all(got[~nz] == 0)
    assert np.max(np.abs(got[nz] - oracle[nz]) / np.abs(oracle[nz])) <= 2.0 ** -23


def test_global_scale_fold_loses_blocks_the_alpha_path_keeps():
    # small weights: the folded scales fall into UE4M3's subnormal range and to zero
    x = _weights(0.004, 1)
    packed, sf, g = naive.quantize(x)
    folded = naive.fold_global_scale(sf, g)
    zeroed = np.mean((folded == 0) & (sf != 0))
    assert zeroed > 0.05, zeroed                      # measured: 11 % of the blocks
    alpha_err = np.linalg.norm(_alpha_path(packed, sf, g) - x) / np.linalg.norm(x)
    fold_err = np.linalg.norm(_fold_path(packed, sf, g) - x) / np.linalg.norm(x)
    assert fold_err > 1.5 * alpha_err, (fold_err, alpha_err)
    # moderate weights: no block vanishes, and the fold still adds error (one more UE4M3 rounding)
    x = _weights(0.02, 2)
    packed, sf, g = naive.quantize(x)
    alpha_err = np.linalg.norm(_alpha_path(packed, sf, g) - x) / np.linalg.norm(x)
    fold_err = np.linalg.norm(_fold_path(packed, sf, g) - x) / np.linalg.norm(x)
    assert fold_err > 1.03 * alpha_err, (fold_err, alpha_err)   # measured: about +8 %


# ------------------------------------------------------------------------------- the patched tree
REF_FN = "get_mn_major_tma_aligned_packed_ue4m3_tensor_torch_impl"


def _in_tree_reference(tree: Path):
    """The UE4M3 packing reference of DeepGEMM's own layout test, compiled alone (it runs on CPU)."""
    src = (tree / "tests" / "test_layout.py").read_text()
    fn = next((n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == REF_FN), None)
    assert fn is not None, f"tests/test_layout.py has no {REF_FN}: the tree does not test UE4M3 packing"
    ns = {"torch": torch, "align": lambda x, y: (x + y - 1) // y * y,
          # TMA wants 16-byte aligned strides: 16 / element size elements
          "get_tma_aligned_size": lambda x, size: (x + 16 // size - 1) // (16 // size) * (16 // size)}
    exec(compile(ast.Module([fn], []), "test_layout.py", "exec"), ns)
    return ns[REF_FN]


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (128, 448), (129, 129), (3, 64, 9)])
def test_tree_reference_packing_matches_the_oracle(dsv4_tree, shape):
    ref = _in_tree_reference(dsv4_tree("deepgemm"))
    codes = np.random.default_rng(sum(shape)).integers(0, 0x7F, size=shape, dtype=np.uint8)  # no NaN, no sign
    codes.reshape(-1)[:4] = [0x00, 0x01, 0x08, 0x7E][: codes.size]                            # zero, subnormal, normal, max
    out = ref(torch.from_numpy(codes).view(torch.float8_e4m3fn))
    want = naive.pack_sf_int32(codes)
    assert tuple(out.shape) == want.shape
    np.testing.assert_array_equal(out.contiguous().numpy(), want)
    mn = shape[-2]
    assert out.stride()[-2] == 1 and out.stride()[-1] == (mn + 3) // 4 * 4  # MN-major, TMA-aligned


def _transform_body(tree: Path) -> str:
    src = (tree / "csrc" / "apis" / "layout.hpp").read_text()
    return src.split("transform_sf_into_required_layout(", 1)[1].split("DG_HOST_UNREACHABLE(\"Unknown SF", 1)[0]


def test_tree_layout_api_accepts_ue4m3_block16(dsv4_tree):
    """Source probe of the host API (it needs an SM100 device to run): transform_sf_into_required_layout
    has a branch for float8_e4m3fn scales at gran_k 16, and refuses FP32 scales there (nothing converts
    UE4M3 to UE8M0 or merges 16-blocks into 32-blocks)."""
    body = _transform_body(dsv4_tree("deepgemm"))
    branches = re.findall(r"if \(([^{;]*kFloat8_e4m3fn[^{;]*)\)", body)
    assert any("gran_k == 16" in b for b in branches), "no UE4M3 block-16 branch in transform_sf_into_required_layout"
    assert re.search(r"DG_HOST_ASSERT\(gran_k != 16 or sf\.scalar_type\(\) != torch::kFloat\)", body)


def test_tree_ue4m3_path_has_no_host_sync_and_refuses_psum_layout(dsv4_tree):
    tree = dsv4_tree("deepgemm")
    smxx = (tree / "csrc/jit_kernels/impls/smxx_layout.hpp").read_text()
    fn = smxx.split("get_mn_major_tma_aligned_packed_ue4m3_tensor(const torch::Tensor& sf) {", 1)[1].split("\n}\n", 1)[0]
    fn = re.sub(r"//[^\n]*", "", fn)  # code only
    assert ".item<" not in fn and ".item()" not in fn and "ue8m0" not in fn.lower()
    body = _transform_body(tree)
    ue4m3 = body.split("kFloat8_e4m3fn and gran_k == 16", 1)[1]
    assert ue4m3.count("DG_HOST_ASSERT(not psum_layout.has_value()") == 2  # both UE4M3 branches
