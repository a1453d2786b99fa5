"""o FP8 QDQ (SGLang patch, SPEC section 3): every implementation against the float64 oracle.

Implementations under test:
- kernels/o_fp8_qdq/torch_qdq.py      eager torch, torch's e4m3 cast ("hw") and the fp32 emulation
- kernels/o_fp8_qdq/sglang_o_fp8_qdq.py   the file the patch adds: its eager path for non-CUDA
  tensors, its Triton kernel through TRITON_INTERPRET=1 (emulated rounding), and on a GPU its
  Triton kernel with the hardware e4m3 conversion and with the emulation.

Shapes are DeepSeek-V4 Flash's attention output before wo_a: o [T, G=8 groups, D=4096]
(64 heads x 512 head dim / 8 o_groups), blocks of 32. Every comparison is on the bf16 bits
(signed zero included): 0 differing values is the bar.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.o_fp8_qdq.naive import bf16_bits_to_f64, o_fp8_qdq_oracle
from kernels.o_fp8_qdq.torch_qdq import o_fp8_qdq_torch

ROOT = Path(__file__).resolve().parents[2]
KERNEL_FILE = ROOT / "kernels" / "o_fp8_qdq" / "sglang_o_fp8_qdq.py"
G, D, BLOCK = 8, 4096, 32
ORACLE_CHUNK = 256  # tokens per oracle call (bounds the float64 temporaries at T=4096)


# ---------------------------------------------------------------------------------------------
# inputs


def bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)


def make_o(T: int, seed: int, g: int = G, d: int = D) -> torch.Tensor:
    """bf16 o [T, g, d]: random values whose per-block scale spans 2^-40..2^40, with edge blocks
    written over the first rows: all-zero, signed zeros, tiny (amax < 1e-4, bf16 subnormals too),
    huge (448*2^k and neighbours, where the scale's power of two is decided by the fp32 product),
    mixed sign, and exact e4m3 ties (normal and subnormal) after scaling."""
    gen = torch.Generator().manual_seed(seed)
    nb = d // BLOCK
    x = torch.randn(T, g, nb, BLOCK, generator=gen)
    x = x * torch.exp2(torch.randint(-40, 41, (T, g, nb, 1), generator=gen).float())
    x = x.reshape(T * g * nb, BLOCK)
    edge: list[torch.Tensor] = []
    edge.append(torch.zeros(BLOCK))
    edge.append(torch.where(torch.arange(BLOCK) % 2 == 0, 0.0, -0.0))
    edge.append(torch.randn(BLOCK, generator=gen) * 1e-6)  # tiny: amax < 1e-4
    edge.append(torch.randn(BLOCK, generator=gen) * 9e-5)
    edge.append(torch.randn(BLOCK, generator=gen) * 1e-39)  # bf16 subnormals
    for k in (-20, -3, 0, 1, 7, 12, 30, 60, 100):
        for top in (446.0, 448.0, 450.0, 447.9):
            b = torch.randn(BLOCK, generator=gen) * 2.0**k * 100
            b[3] = top * 2.0**k
            b[17] = -top * 2.0**k
            edge.append(b)
    mixed = torch.randn(BLOCK, generator=gen).abs() * 5
    mixed[::2] *= -1
    edge.append(mixed)
    # Ties. With amax = 448 * 2^k the scale is 2^k; x / s = m + 0.5 quanta lands exactly between
    # two e4m3 values: normal binade [8, 16) (quantum 1) and the subnormal grid (quantum 2^-9).
    for k in (-8, 0, 5):
        b = torch.zeros(BLOCK)
        b[0] = 448.0 * 2.0**k
        vals = [8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, -8.5, -9.5,  # normal ties
                2.0**-10, 3 * 2.0**-10, 5 * 2.0**-10, -(2.0**-10), -3 * 2.0**-10,  # subnormal ties
                2.0**-6 + 2.0**-10, 0.5 + 2.0**-5, 2.0**-9 * 7.5]
        for i, v in enumerate(vals):
            b[1 + i] = v * 2.0**k
        edge.append(b)
    edge_t = torch.stack(edge)
    n = min(len(edge_t), x.shape[0])
    x[:n] = edge_t[:n]
    return x.reshape(T, g, d).to(torch.bfloat16)


def oracle_bits(o: torch.Tensor) -> np.ndarray:
    b = bits(o)
    return np.concatenate([o_fp8_qdq_oracle(b[i:i + ORACLE_CHUNK], BLOCK)
                           for i in range(0, b.shape[0], ORACLE_CHUNK)])


def assert_same_bits(got: torch.Tensor, want: np.ndarray, what: str, seed: int) -> None:
    g = bits(got)
    bad = g != want
    n = int(bad.sum())
    if n:
        idx = tuple(np.argwhere(bad)[0])
        pytest.fail(f"{what} (seed {seed}): {n} of {g.size} bf16 values differ from the oracle; first "
                    f"at {idx}: got {bf16_bits_to_f64(g[idx])!r} (0x{g[idx]:04x}), want "
                    f"{bf16_bits_to_f64(want[idx])!r} (0x{want[idx]:04x})")


def fresh_seed() -> int:
    return secrets.randbelow(2**31)


_cases: dict[tuple[int, int], tuple[torch.Tensor, np.ndarray]] = {}


def case(T: int) -> tuple[torch.Tensor, np.ndarray, int]:
    """One fresh random input per T per session (the oracle at T=4096 takes ~20 s)."""
    for (t, seed), v in _cases.items():
        if t == T:
            return v[0], v[1], seed
    seed = fresh_seed()
    o = make_o(T, seed)
    _cases[(T, seed)] = (o, oracle_bits(o))
    return o, _cases[(T, seed)][1], seed


# ---------------------------------------------------------------------------------------------
# the oracle itself


def test_oracle_hand_values():
    """Values worked out by hand from SPEC section 3."""
    o = torch.zeros(1, 1, 64, dtype=torch.bfloat16)
    # Block 0: amax 1 -> r = fp32(1/448) = 2^-8.807.. -> s = 2^-8; 0.3 * 256 = 76.8 -> e4m3 80
    # (quantum 8 in [64, 128)) -> 80 / 256 = 0.3125; -1 stays -1; 0.01 * 256 = 2.56 -> 2.5.
    o[0, 0, 0], o[0, 0, 1], o[0, 0, 2] = 0.3, -1.0, 0.01
    # Block 1: amax 448 * 2^4 -> r = 2^4 exactly (fp32(1/448) * 448 rounds to 1) -> s = 16; 8.5*16
    # is an e4m3 tie -> 8 * 16 = 128; 9.5 * 16 -> 10 * 16 = 160; -2^-10 * 16 (subnormal tie) -> -0.
    o[0, 0, 32], o[0, 0, 33], o[0, 0, 34], o[0, 0, 35] = 7168.0, 136.0, 152.0, -(2.0**-6)
    got = bf16_bits_to_f64(o_fp8_qdq_oracle(bits(o)))[0, 0]
    want = {0: 0.3125, 1: -1.0, 2: 0.009765625, 32: 7168.0, 33: 128.0, 34: 160.0, 35: -0.0}
    for i, v in want.items():
        assert got[i] == v and np.signbit(got[i]) == np.signbit(v), (i, got[i], v)
    assert np.all(got[3:32] == 0) and np.all(got[36:] == 0)


def test_oracle_tiny_block_uses_floor_scale():
    """amax < 1e-4: s comes from float32(1e-4) * float32(1/448) -> 2^-22; x = 3 * 2^-31 is 3 * 2^-9
    in e4m3 units (subnormal, exact)."""
    o = torch.zeros(1, 1, 32, dtype=torch.bfloat16)
    o[0, 0, 0] = 3 * 2.0**-31
    o[0, 0, 1] = 2.0**-32  # 0.5 quantum: tie -> 0
    got = bf16_bits_to_f64(o_fp8_qdq_oracle(bits(o)))[0, 0]
    assert got[0] == 3 * 2.0**-31 and got[1] == 0.0


# ---------------------------------------------------------------------------------------------
# CPU: eager torch and the patch file's eager path


TS_CPU = (1, 3, 37, 4096)


@pytest.mark.parametrize("T", TS_CPU)
@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_torch_eager_matches_oracle(T, emulate):
    o, want, seed = case(T)
    assert_same_bits(o_fp8_qdq_torch(o, BLOCK, emulate), want, f"torch_qdq T={T} emulate={emulate}", seed)


@pytest.mark.parametrize("T", TS_CPU)
@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_patch_file_cpu_path_matches_oracle(T, emulate):
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    o, want, seed = case(T)
    x = o.clone()
    assert o_fp8_qdq_(x, BLOCK, emulate=emulate) is x
    assert_same_bits(x, want, f"patch file (eager path) T={T} emulate={emulate}", seed)


def test_block_must_divide_row():
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    with pytest.raises(AssertionError):
        o_fp8_qdq_(torch.zeros(2, 8, 48, dtype=torch.bfloat16), 32)


def test_empty_and_idempotent():
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    o_fp8_qdq_(torch.zeros(0, 8, 4096, dtype=torch.bfloat16), 32)
    seed = fresh_seed()
    o = make_o(2, seed)
    once = o_fp8_qdq_(o.clone(), 32)
    twice = o_fp8_qdq_(once.clone(), 32)
    assert np.array_equal(bits(once), bits(twice)), f"seed {seed}: QDQ of a QDQ'd tensor changed it"


# ---------------------------------------------------------------------------------------------
# Triton interpreter (CPU): the patch file's kernel, emulated rounding


_INTERP_SCRIPT = r"""
import sys, numpy as np, torch
from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_
d = dict(np.load(sys.argv[1]))
out = {}
for k, v in d.items():
    t = torch.from_numpy(v.view(np.int16)).view(torch.bfloat16).clone()
    if k == "strided":
        view = t[:, :-1, 32:-32]  # [T, G, D] view of [T, G + 1, D + 64]
        o_fp8_qdq_(view, 32, emulate=True)
    else:
        o_fp8_qdq_(t, 32, emulate=True)
    out[k] = t.view(torch.int16).numpy().view(np.uint16)
np.savez(sys.argv[2], **out)
"""


@pytest.fixture(scope="module")
def interp_run(tmp_path_factory):
    """Run the patch file's Triton kernel under TRITON_INTERPRET=1 in a fresh interpreter (the
    variable has to be set before triton.jit runs; a second, interpreted copy of a module that was
    already imported compiled does not run), on every array given; returns the results."""
    import subprocess

    d = tmp_path_factory.mktemp("interp")

    def run(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        np.savez(d / "in.npz", **arrays)
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
        p = subprocess.run([sys.executable, "-c", _INTERP_SCRIPT, str(d / "in.npz"), str(d / "out.npz")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return dict(np.load(d / "out.npz"))

    return run


@pytest.fixture(scope="module")
def interp_inputs():
    return {T: case(T) for T in (1, 3, 37)}


@pytest.fixture(scope="module")
def interp_outputs(interp_run, interp_inputs):
    return interp_run({f"T{T}": bits(v[0]) for T, v in interp_inputs.items()})


@pytest.mark.parametrize("T", (1, 3, 37))
def test_triton_interpreter_matches_oracle(interp_inputs, interp_outputs, T):
    o, want, seed = interp_inputs[T]
    got = torch.from_numpy(interp_outputs[f"T{T}"].view(np.int16)).view(torch.bfloat16)
    assert_same_bits(got, want, f"Triton (interpreter, emulated) T={T}", seed)


def test_triton_interpreter_strided_view(interp_run):
    """o as MQALayer hands it over: a [T, G, D] view of a wider buffer (token stride > G*D, group
    stride > D). Only the view changes; the gaps keep their poison."""
    seed = fresh_seed()
    T, g, d = 3, 4, 256
    src = make_o(T, seed, g, d)
    buf = torch.full((T, g + 1, d + 64), -7.0, dtype=torch.bfloat16)
    buf[:, :g, 32:32 + d] = src
    got = interp_run({"strided": bits(buf)})["strided"]
    got_t = torch.from_numpy(got.view(np.int16)).view(torch.bfloat16)
    assert_same_bits(got_t[:, :g, 32:32 + d], o_fp8_qdq_oracle(bits(src)), "Triton strided view", seed)
    mask = torch.ones_like(buf, dtype=torch.bool)
    mask[:, :g, 32:32 + d] = False
    assert torch.all(got_t[mask] == -7.0)


# ---------------------------------------------------------------------------------------------
# GPU (H200): hardware e4m3 conversion and the emulation, Triton kernel


def _cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the hardware-e4m3 path needs an sm89+ GPU (run on the H200)")


@pytest.mark.gpu
@pytest.mark.parametrize("T", TS_CPU)
@pytest.mark.parametrize("emulate", [False, True], ids=["hw", "emulated"])
def test_triton_gpu_matches_oracle(T, emulate):
    _cuda_or_skip()
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import _hw_fp8_supported, o_fp8_qdq_

    if not emulate:
        assert _hw_fp8_supported(torch.cuda.current_device()), "expected sm89+ for the hardware path"
    o, want, seed = case(T)
    x = o.cuda()
    y = o_fp8_qdq_(x, BLOCK, emulate=emulate)
    torch.cuda.synchronize()
    assert y is x
    assert_same_bits(x, want, f"Triton GPU T={T} emulate={emulate}", seed)


@pytest.mark.gpu
@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_torch_eager_gpu_matches_oracle(emulate):
    _cuda_or_skip()
    o, want, seed = case(37)
    assert_same_bits(o_fp8_qdq_torch(o.cuda(), BLOCK, emulate), want, "torch_qdq on GPU", seed)


@pytest.mark.gpu
@pytest.mark.parametrize("emulate", [False, True], ids=["hw", "emulated"])
def test_triton_gpu_strided_view_and_cuda_graph(emulate):
    """A strided [T, G, D] view, run inside a captured CUDA graph (capture fails on a host sync)."""
    _cuda_or_skip()
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    seed = fresh_seed()
    T = 64
    src = make_o(T, seed).cuda()
    buf = torch.full((T, G + 1, D + 64), -7.0, dtype=torch.bfloat16, device="cuda")
    view = buf[:, :G, 64:]
    view.copy_(src)
    o_fp8_qdq_(view, BLOCK, emulate=emulate)  # warm up (compile) outside the capture
    torch.cuda.synchronize()
    view.copy_(src)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_fp8_qdq_(view, BLOCK, emulate=emulate)
    view.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert_same_bits(view, o_fp8_qdq_oracle(bits(src)), "Triton GPU strided view in a CUDA graph", seed)
    mask = torch.ones_like(buf, dtype=torch.bool)
    mask[:, :G, 64:] = False
    assert torch.all(buf[mask] == -7.0)
