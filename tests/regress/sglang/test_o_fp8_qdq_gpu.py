"""The SGLang o FP8 QDQ patch on a CUDA GPU (level `gpu`; run on the lent H200).

The patched tree's kernel file (python/sglang/kernels/ops/quantization/o_fp8_qdq.py imports only
torch and triton) is loaded from the tree on its own and run on CUDA tensors, hardware e4m3 and the
emulation, against the float64 oracle (kernels/o_fp8_qdq/naive.py); and the in-tree kernel test the
patch adds runs on the GPU, its CUDA class included (_in_tree_gpu_runner.py says what is stood in).

Run: dsv4-patch regress sglang -m gpu --record gpu --hardware H200
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import torch

    from kernels.o_fp8_qdq.naive import o_fp8_qdq_oracle
except ImportError:  # still collected (regress names these ids), then skipped below
    torch = o_fp8_qdq_oracle = None

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch is None, reason="needs an NVIDIA CUDA GPU (the lent H200) and torch there "
                       "(pip install torch==2.13.0 -e '.[kernels]')"),
    pytest.mark.skipif(torch is not None and not (torch.cuda.is_available() and torch.version.hip is None),
                       reason="needs an NVIDIA CUDA GPU (the lent H200)"),
]

HERE = Path(__file__).resolve().parent
KERNEL = "python/sglang/kernels/ops/quantization/o_fp8_qdq.py"
IN_TREE_TEST = "test/registered/kernels/ops/quantization/test_o_fp8_qdq.py"
G, D, BLOCK = 8, 4096, 32  # DeepSeek-V4 Flash: 64 heads x 512 in 8 o-groups


def _kernel(tree: Path):
    # the pin has no such file: an AssertionError (a bump reads it as `needed`), not a FileNotFoundError
    assert (tree / KERNEL).is_file(), f"{KERNEL} is not in {tree}"
    spec = importlib.util.spec_from_file_location("_sglang_o_fp8_qdq_gpu", tree / KERNEL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _make_o(T: int, seed: int) -> torch.Tensor:
    """Random blocks over 2^-30..2^30, with edge blocks planted first: all zero, below the 1e-4 amax
    floor, amax exactly 448 * 2^k beside every e4m3 subnormal code and exact ties, one bf16 step above
    it (the scale doubles), the top of the bf16 range (the fp32 product overflows to inf)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(T * G * D // BLOCK, BLOCK, generator=gen)
    x *= torch.exp2(torch.randint(-30, 31, (x.shape[0], 1), generator=gen).float())
    edges = [torch.zeros(BLOCK), torch.full((BLOCK,), 3e-5)]
    for k in (-8, 0, 9, 100):
        b = torch.zeros(BLOCK)
        vals = [448.0, 8.5, 9.5, -10.5, 2.0**-10, 3 * 2.0**-10] + [m * 2.0**-9 for m in range(1, 8)]
        b[:len(vals)] = torch.tensor(vals) * 2.0**k
        edges += [b, b.clone()]
        edges[-1][0] = 450.0 * 2.0**k
    top = torch.zeros(BLOCK)
    top[:3] = torch.tensor([torch.finfo(torch.bfloat16).max, -torch.finfo(torch.bfloat16).max, 2.0**127])
    edges.append(top)
    n = min(len(edges), x.shape[0])
    x[:n] = torch.stack(edges)[:n]
    return x.reshape(T, G, D).to(torch.bfloat16)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.cpu().view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("T", [1, 37, 300, 4096])  # 300 x 8 rows: the kernel's large-T chunk
def test_patched_kernel_on_gpu_matches_oracle(dsv4_tree, T):
    """The patched tree's Triton kernel on the GPU, hardware e4m3 and emulated, gives the oracle's
    bf16 bits (signed zero and inf included)."""
    mod = _kernel(dsv4_tree("sglang"))
    o = _make_o(T, seed=1017 + T)
    want = o_fp8_qdq_oracle(_bits(o), BLOCK)
    for emulate in (False, True):
        x = o.cuda()
        assert mod.o_fp8_qdq_(x, BLOCK, emulate=emulate) is x
        torch.cuda.synchronize()
        got = _bits(x)
        assert np.array_equal(got, want), f"T={T} emulate={emulate}: {int((got != want).sum())} differ"


def test_patched_kernel_in_a_cuda_graph_on_a_strided_view(dsv4_tree):
    """Captured once and replayed on new values: a strided [T, G, D] view is rounded in place and the
    gaps around it stay as they were (one launch, no host sync)."""
    mod = _kernel(dsv4_tree("sglang"))
    T = 64
    buf = torch.full((T, G + 1, D + 64), -7.0, dtype=torch.bfloat16, device="cuda")
    view = buf[:, :G, 32:32 + D]
    view.copy_(_make_o(T, seed=1).cuda())
    mod.o_fp8_qdq_(view, BLOCK)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mod.o_fp8_qdq_(view, BLOCK)
    src = _make_o(T, seed=2)
    view.copy_(src.cuda())
    graph.replay()
    torch.cuda.synchronize()
    assert np.array_equal(_bits(view.contiguous()), o_fp8_qdq_oracle(_bits(src), BLOCK))
    gaps = torch.ones_like(buf, dtype=torch.bool)
    gaps[:, :G, 32:32 + D] = False
    assert bool((buf[gaps] == -7.0).all())


def test_in_tree_kernel_test_passes_on_gpu(dsv4_tree):
    """The patch's in-tree kernel test, run SGLang's way, passes on the GPU with nothing skipped:
    its CPU class (argument checks, devices refused, the registry entry) and its CUDA class (hardware
    and emulated Triton paths against the reference, a strided view, T = 4096, a CUDA-graph replay)."""
    pytest.importorskip("msgspec", reason="sglang.kernels.spec needs msgspec (carry its wheel)")
    tree = dsv4_tree("sglang")
    p = subprocess.run([sys.executable, str(HERE / "_in_tree_gpu_runner.py"), str(tree), str(tree / IN_TREE_TEST),
                        "-v"], cwd=tree, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Ran 6 tests" in p.stderr and p.stderr.rstrip().endswith("OK"), p.stderr[-2000:]
