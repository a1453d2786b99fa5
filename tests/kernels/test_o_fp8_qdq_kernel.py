"""o FP8 QDQ (SGLang patch; docs/background.md): every implementation against the float64 oracle.

Implementations under test:
- kernels/o_fp8_qdq/torch_qdq.py      eager torch, torch's e4m3 cast ("hw") and the fp32 emulation
- kernels/o_fp8_qdq/sglang_o_fp8_qdq.py   the file the patch adds (an operator for NVIDIA CUDA GPUs
  only): on a GPU its Triton kernel with the hardware e4m3 conversion and with the emulation; on CPU
  its argument checks and device refusals, and its Triton kernel under TRITON_INTERPRET=1 (emulated
  rounding), launched by
- kernels/o_fp8_qdq/sglang_o_fp8_qdq_cpu.py   the project's CPU harness around it (not in the patch):
  the operator's argument checks, then its kernel under the interpreter, or else an eager torch path
  in the kernel's bit-level arithmetic.

Shapes are DeepSeek-V4 Flash's attention output before wo_a: o [T, G=8 groups, D=4096]
(64 heads x 512 head dim / 8 o_groups), blocks of 32. Every comparison is on the bf16 bits
(signed zero included): 0 differing values is the bar.

Inputs are deterministic: each case has a fixed seed (two runs check the same values), and every
edge the kernels have is planted explicitly by `edge_blocks()`, not left to chance. Large T: on CPU
the eager paths run T=4096 (narrow rows); the Triton kernel's large-T configuration (4096-value
chunks, chosen for >= 2048 rows) runs under the interpreter by launching the kernel directly with
each chunk size the wrapper can pick, and on the GPU through the wrapper at T=300 and T=4096.
Blocks holding NaN or +-inf (`make_non_finite_o()`) must come out NaN, all of the block, as bf16
0x7FC0, on every path (the reference's fp32 arithmetic gives NaN there).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.o_fp8_qdq.naive import bf16_bits_to_f64, f64_to_bf16_bits, o_fp8_qdq_oracle
from kernels.o_fp8_qdq.torch_qdq import o_fp8_qdq_torch

ROOT = Path(__file__).resolve().parents[2]
KERNEL_FILE = ROOT / "kernels" / "o_fp8_qdq" / "sglang_o_fp8_qdq.py"
G, D, BLOCK = 8, 4096, 32
ORACLE_CHUNK = 256  # tokens per oracle call (bounds the float64 temporaries at T=4096)


# ---------------------------------------------------------------------------------------------
# inputs


def bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)


BF16_MAX = 3.3895313892515355e38  # 0x7F7F


def edge_blocks() -> list[torch.Tensor]:
    """Every edge of the QDQ arithmetic, one block of 32 values each (before random rows):
    - all-zero, signed zeros; amax just below / at / above the 1e-4 floor; bf16 subnormals;
    - amax = 448 * 2^k exactly (r = fp32(1/448) * 448 * 2^k rounds to 2^k, so the scale's exponent
      has no +1) together with *every* e4m3 subnormal code m * 2^-9 (m = 1..7) and the smallest
      normal, scaled by 2^k: an exponent off by one moves all of them;
    - amax = 448 * 2^k +- one bf16 ulp (the +1 decided by the fp32 product's mantissa bits);
    - exact e4m3 ties after scaling: normal (m + 0.5 in [8, 16)), subnormal (odd multiples of 2^-10),
      and at the top (464 -> 448 is clamped first; 440 is between 416 and 448 -> 448, even);
    - the top of the bf16 range, where q * s overflows fp32: +-inf, as in the reference; beside it,
      values whose x / s is an fp32 subnormal with its lowest bit set (they round to 0);
    - mixed signs, and values that clamp (x / s > 448 cannot happen, but |x| = amax maps to <= 448)."""
    blocks: list[torch.Tensor] = []

    def block(vals, fill=0.0):
        b = torch.full((BLOCK,), fill)
        b[:len(vals)] = torch.tensor(vals, dtype=torch.float64).float()
        return b

    blocks.append(torch.zeros(BLOCK))
    blocks.append(torch.where(torch.arange(BLOCK) % 2 == 0, 0.0, -0.0))
    floor_lo, floor_at, floor_hi = (torch.tensor([v], dtype=torch.int16).view(torch.bfloat16).item()
                                    for v in (0x38D1, 0x38D2, 0x38D3))  # bf16 around fp32(1e-4)
    for top in (floor_lo, floor_at, floor_hi):
        blocks.append(block([top, -top / 3, top / 7, top * 2.0**-12, -(2.0**-133)]))
    blocks.append(block([1e-39, -3e-39, 9.2e-41, 2.0**-133]))  # bf16 subnormals
    subnormal_units = [m * 2.0**-9 for m in range(1, 8)] + [2.0**-6, 2.0**-10, 3 * 2.0**-10]
    for k in (-30, -8, -1, 0, 1, 4, 9, 40, 100):
        base = [448.0] + subnormal_units + [-u for u in subnormal_units] + [8.5, 9.5, 15.5, -10.5]
        blocks.append(block([v * 2.0**k for v in base]))
        for ulp in (-1, 1):  # amax one bf16 step off 448 * 2^k
            top = (448.0 + 2 * ulp) * 2.0**k  # bf16 steps by 2 in [256, 512)
            blocks.append(block([top] + [v * 2.0**k for v in subnormal_units]))
    for k in (-8, 0, 5):  # ties, with amax = 448 * 2^k so that x / s is exactly the value given
        vals = [448.0, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, 14.5, 15.5, -8.5, -9.5, 2.0**-10, 3 * 2.0**-10,
                5 * 2.0**-10, -(2.0**-10), -3 * 2.0**-10, 2.0**-6 + 2.0**-10, 0.5 + 2.0**-5, 2.0**-9 * 7.5,
                440.0, -440.0, 232.0, 248.0, 2.0**-6 - 2.0**-10]
        blocks.append(block([v * 2.0**k for v in vals]))
    blocks.append(block([BF16_MAX, -BF16_MAX, BF16_MAX / 2, 1.0, -2.0**-100]))  # fp32 overflow -> inf
    # s = 2^120: x / s = 3 * 2^-151 rounds to the fp32 subnormal 2^-149 (lowest bit set) -> 0
    blocks.append(block([BF16_MAX, 3 * 2.0**-31, -3 * 2.0**-31]))
    blocks.append(block([-BF16_MAX, 2.0**127, 2.0**126 * 1.875]))
    mixed = torch.linspace(-5, 5, BLOCK)
    blocks.append(mixed)
    return blocks


def make_o(T: int, seed: int, g: int = G, d: int = D) -> torch.Tensor:
    """bf16 o [T, g, d]: the edge blocks first (row-major over (t, g, block)), then random values
    from `seed` whose per-block scale spans 2^-40..2^40."""
    gen = torch.Generator().manual_seed(seed)
    nb = d // BLOCK
    x = torch.randn(T, g, nb, BLOCK, generator=gen)
    x = x * torch.exp2(torch.randint(-40, 41, (T, g, nb, 1), generator=gen).float())
    x = x.reshape(T * g * nb, BLOCK)
    edge_t = torch.stack(edge_blocks())
    n = min(len(edge_t), x.shape[0])
    x[:n] = edge_t[:n]
    return x.reshape(T, g, d).to(torch.bfloat16)


def non_finite_blocks() -> list[torch.Tensor]:
    """Blocks holding NaN or +-inf among finite values (outside the input contract, but a NaN from an
    upstream overflow must stay visible): each becomes NaN, all of it, bits 0x7FC0, in every path."""
    inf, nan = float("inf"), float("nan")
    out = []
    for bad in ([nan], [inf], [-inf], [inf, -inf], [1.0, -3.0, nan, inf, -inf, -0.0, 0.0], [nan] * (BLOCK - 3)):
        b = torch.linspace(-5.0, 5.0, BLOCK)
        b[3:3 + len(bad)] = torch.tensor(bad)
        out.append(b)
    b = torch.full((BLOCK,), 2.0**-20)  # below the amax floor otherwise
    b[-1] = -inf  # the last value of the block
    out.append(b)
    return out


NON_FINITE_BITS = (0xFFC1, 0x7F81, 0xFF81)  # a negative NaN with a payload; bf16 signalling NaNs
NON_FINITE_SEED = 4242


def make_non_finite_o(T: int = 3, g: int = 2, d: int = 512, seed: int = NON_FINITE_SEED) -> torch.Tensor:
    """make_o with the non-finite blocks planted after the edge blocks, at a row's first and last
    block, next to finite blocks, and one lone NaN / inf bit pattern each in three more blocks."""
    o = make_o(T, seed, g, d)
    blocks = o.view(-1, BLOCK)
    nb = d // BLOCK
    ends = [nb * (T * g - 1), nb * (T * g - 1) + nb - 1]  # the last row's first and last block
    where = ends + [i for i in range(len(edge_blocks()), blocks.shape[0], 2) if i not in ends]
    bad = non_finite_blocks()
    assert len(where) >= len(bad) + len(NON_FINITE_BITS)
    for i, b in zip(where, bad):
        blocks[i] = b.to(torch.bfloat16)
    raw = blocks.view(torch.int16)
    for i, pattern in zip(where[len(bad):], NON_FINITE_BITS):
        raw[i, 5] = torch.tensor(pattern, dtype=torch.int32).to(torch.int16)
    return o


POW2_SEED = 5151
POW2_KS = (-20, -9, -1, 0, 1, 7, 8, 9, 10, 30)


def make_pow2_o(seed: int = POW2_SEED) -> torch.Tensor:
    """o [1, 2, 2048] whose blocks have amax next to a power of two, where an exponent taken with a
    float log2 instead of from the fp32 bits can be off by one: amax = 2^k, 2^k one bf16 step up and
    down, 448 * 2^k (r = amax * fp32(1/448) is 2^k exactly) and one bf16 step either side of it, each
    with every e4m3 subnormal unit scaled by the block's 2^k; the rest random (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    o = (torch.randn(1, 2, 2048, generator=gen) * 3).reshape(-1, BLOCK)
    units = [m * 2.0**-9 for m in range(1, 8)] + [2.0**-6, 0.5, 0.75]  # all below every top
    i = 0
    for k in POW2_KS:
        for top in (1.0, 1 + 2.0**-7, 1 - 2.0**-8, 448.0, 446.0, 450.0):  # bf16 steps
            vals = [top * 2.0**k] + [u * 2.0**k for u in units] + [-u * 2.0**(k - 1) for u in units]
            o[i] = 0.0
            o[i, :len(vals)] = torch.tensor(vals, dtype=torch.float64).float()
            i += 1
    return o.reshape(1, 2, 2048).to(torch.bfloat16)


# A value QDQ changes on its own (a block holding only it: x / s = 258 -> 256, so 1.0078125 -> 1.0):
# the poison of the gaps around a strided view, so that a write outside the view shows.
POISON = 1.0078125


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


SEEDS = {1: 101, 3: 103, 37: 137, 300: 1300, 4096: 14096}  # fixed: two runs check the same inputs


_cases: dict[tuple[int, int, int], tuple[torch.Tensor, np.ndarray, int]] = {}


def case(T: int, g: int = G, d: int = D) -> tuple[torch.Tensor, np.ndarray, int]:
    """The input of size T (seed SEEDS[T]) and its oracle result, computed once per session."""
    key = (T, g, d)
    if key not in _cases:
        seed = SEEDS[T] + g + d
        o = make_o(T, seed, g, d)
        _cases[key] = (o, oracle_bits(o), seed)
    return _cases[key]


# ---------------------------------------------------------------------------------------------
# the oracle itself


def test_oracle_hand_values():
    """Values worked out by hand from the arithmetic."""
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


def test_oracle_bf16_rounding_matches_torch():
    """The oracle's float64 -> bf16 step on its own (QDQ outputs never need rounding, so the QDQ
    tests cannot check it): round to nearest even on float32 inputs, ties both ways, NaN quieted,
    against torch's bf16 cast."""
    rng = np.random.default_rng(0xBF16)
    bits32 = np.concatenate([rng.integers(0, 2**32, 20_000, dtype=np.uint64),
                             [0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x7F7FFFFF, 0xFF7F8000,
                              0x00008000, 0x00018000, 0x80000000, 0x7F800000, 0x7FC00000, 0xFF800001,
                              0x7F800001, 0x7FA00000]]).astype(np.uint32)
    x = bits32.view(np.float32)
    want = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    with np.errstate(invalid="ignore"):  # the signalling NaNs among the inputs
        got = f64_to_bf16_bits(x.astype(np.float64))
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.all((got[nan] & 0x7FC0) == 0x7FC0)  # a quiet NaN, whatever the payload


def test_oracle_overflow_edge():
    """float32 arithmetic turns |x| >= 2^128 - 2^103 (the half-way point above the largest float32)
    into inf; anything else must be exactly a float32 number (the oracle's own assumption)."""
    flt_max = float(np.finfo(np.float32).max)
    x = np.array([2.0**128, -(2.0**128), 2.0**128 - 2.0**103, flt_max, 2.0**127 * 1.875, 1.0])
    got = f64_to_bf16_bits(x)
    assert got.tolist() == [0x7F80, 0xFF80, 0x7F80, 0x7F80, 0x7F70, 0x3F80]
    for bad in (flt_max + 2.0**102, 1.0 + 2.0**-30):
        with pytest.raises(ValueError, match="float32"):
            f64_to_bf16_bits(np.array([bad]))


def test_reference_arithmetic_makes_non_finite_blocks_nan():
    """What the reference does with NaN and +-inf, in plain float32 torch (act_quant with a ue8m0
    scale): s = 2^ceil(log2(amax / 448)) is inf or NaN, so x / s is 0, NaN (inf / inf) or NaN, and
    q * s is NaN (0 * inf) for every value of the block. That is the behaviour every path follows."""
    for b in non_finite_blocks():
        x = b.to(torch.bfloat16).float()
        amax = x.abs().amax().clamp_min(1e-4)
        s = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))
        q = (x / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        assert torch.isnan(q.float() * s).all(), b


def test_oracle_non_finite_blocks_are_nan_and_stay_in_their_block():
    """The oracle: a block holding NaN or +-inf is NaN (0x7FC0) in full; the other blocks are what
    they are with those blocks zeroed."""
    o = make_non_finite_o()
    got = o_fp8_qdq_oracle(bits(o), BLOCK).reshape(-1, BLOCK)
    bad = ~torch.isfinite(o.float()).view(-1, BLOCK).all(dim=1).numpy()
    assert bad.sum() == len(non_finite_blocks()) + len(NON_FINITE_BITS)
    assert np.all(got[bad] == 0x7FC0)
    clean = o.clone()
    clean.view(-1, BLOCK)[torch.from_numpy(bad)] = 0
    want = o_fp8_qdq_oracle(bits(clean), BLOCK).reshape(-1, BLOCK)
    assert np.array_equal(got[~bad], want[~bad])


def test_oracle_refuses_a_block_that_does_not_divide_d():
    with pytest.raises(ValueError, match="multiple"):
        o_fp8_qdq_oracle(np.zeros((1, 1, 48), np.uint16), 32)


# ---------------------------------------------------------------------------------------------
# CPU: eager torch and the patch file's eager path


TS_CPU = (1, 3, 37)  # Flash shape; T=4096 below with narrow rows
LARGE_T = dict(T=4096, g=2, d=256)


def test_edges_are_planted():
    """The edge blocks all land in the T=1 input, and they reach the cases they are meant for."""
    o, want, _ = case(1)
    x = bf16_bits_to_f64(bits(o)).reshape(-1, BLOCK)
    got = bf16_bits_to_f64(want).reshape(-1, BLOCK)
    n = len(edge_blocks())
    assert n <= x.shape[0]
    assert np.isinf(got[:n]).any() and (np.abs(x[:n]) == 448.0 * 2.0**100).any()
    assert (x[:n] == 0).all(axis=1).any() and (np.abs(x[:n]).max(axis=1) < 1e-4).any()


@pytest.mark.parametrize("T", TS_CPU + (4096,))
@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_torch_eager_matches_oracle(T, emulate):
    o, want, seed = case(T) if T != 4096 else case(**LARGE_T)
    assert_same_bits(o_fp8_qdq_torch(o, BLOCK, emulate), want, f"torch_qdq T={T} emulate={emulate}", seed)


@pytest.mark.parametrize("T", TS_CPU + (4096,))
@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_cpu_harness_eager_path_matches_oracle(T, emulate):
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_

    o, want, seed = case(T) if T != 4096 else case(**LARGE_T)
    x = o.clone()
    assert o_fp8_qdq_(x, BLOCK, emulate=emulate) is x
    assert_same_bits(x, want, f"CPU harness (eager path) T={T} emulate={emulate}", seed)


def test_pow2_edges_are_planted():
    """make_pow2_o holds what it says: 448 * 2^k gives r = 2^k exactly (mantissa bits 0), one bf16
    step either side gives r off a power of two, and the oracle's exponent is the exact ceil."""
    o = make_pow2_o()
    amax = o.float().reshape(-1, BLOCK).abs().amax(dim=1).numpy()
    r = (amax * np.float32(1 / 448)).astype(np.float32)
    k = np.array(POW2_KS, dtype=np.float64)
    for j, top in enumerate((1.0, 1 + 2.0**-7, 1 - 2.0**-8, 448.0, 446.0, 450.0)):
        assert np.array_equal(amax[j:6 * len(POW2_KS):6], (top * 2.0**k).astype(np.float32))
    exact = r[3:6 * len(POW2_KS):6]
    assert np.array_equal(exact, (2.0**k).astype(np.float32))
    from kernels.o_fp8_qdq.naive import ceil_log2_f32_bits
    assert np.array_equal(ceil_log2_f32_bits(exact), k.astype(np.int64))
    assert np.array_equal(ceil_log2_f32_bits(r[5:6 * len(POW2_KS):6]), k.astype(np.int64) + 1)


@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_scale_exponent_next_to_powers_of_two_cpu(emulate):
    """Eager torch and the CPU harness's eager path on amax next to powers of two (make_pow2_o)."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_

    o = make_pow2_o()
    want = oracle_bits(o)
    assert_same_bits(o_fp8_qdq_torch(o, BLOCK, emulate), want, "eager torch, pow2", POW2_SEED)
    if os.environ.get("TRITON_INTERPRET") != "1":  # otherwise the harness runs the kernel (below)
        assert_same_bits(o_fp8_qdq_(o.clone(), BLOCK, emulate), want, "CPU harness eager path, pow2", POW2_SEED)


@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_cpu_harness_eager_path_non_finite_blocks(emulate):
    """The eager path on blocks holding NaN, +inf, -inf, both infinities, finite values among them:
    NaN (0x7FC0) in full, bit for bit with the oracle, neighbours untouched."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_

    o = make_non_finite_o()
    x = o.clone()
    o_fp8_qdq_(x, BLOCK, emulate=emulate)
    assert_same_bits(x, o_fp8_qdq_oracle(bits(o), BLOCK), f"eager path, non-finite, emulate={emulate}",
                     NON_FINITE_SEED)


NOT_POW2 = "^SGLANG_DSV4_O_FP8_QDQ_BLOCK={} is not a power of two"


@pytest.mark.parametrize("shape,block,what", [
    ((2, 8, 48), 32, "^SGLANG_DSV4_O_FP8_QDQ_BLOCK=32 does not divide the group row width D=48"),
    ((2, 8, 96), 48, NOT_POW2.format(48)),  # 96 % 48 == 0: passes the divisibility check alone
    ((2, 8, 96), 3, NOT_POW2.format(3)),
    ((2, 8, 64), 0, NOT_POW2.format(0)),
    ((2, 8, 64), -32, NOT_POW2.format(-32)),
    ((2, 8, 64), True, NOT_POW2.format(True)),  # a bool is an int (== 1): refused all the same
    ((2, 64), 32, r"\[T, G, D\]"),
])
def test_bad_arguments_fail_with_a_clear_message(shape, block, what):
    """The operator itself, on CPU tensors: its argument checks come before its device check."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    o = torch.ones(shape, dtype=torch.bfloat16)
    before = o.clone()
    with pytest.raises(ValueError, match=what):
        o_fp8_qdq_(o, block)
    assert torch.equal(o, before)


@pytest.mark.parametrize("block,shape", [(1, (1, 1, 1)), (1, (2, 3, 8)), (64, (3, 2, 256)), (2, (1, 1, 2))])
def test_other_power_of_two_blocks_match_oracle(block, shape):
    """The block is a setting: every power of two that divides D is valid, one value per block
    included (then x is rounded to e4m3 under its own scale)."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_

    o = make_o(shape[0], 77, shape[1], max(shape[2], BLOCK))[..., :shape[2]].contiguous()
    o.view(-1)[0] = 450.0  # never left untouched: rounds to 448
    want = o_fp8_qdq_oracle(bits(o), block)
    for emulate in (False, True):
        x = o.clone()
        o_fp8_qdq_(x, block, emulate=emulate)
        assert_same_bits(x, want, f"block={block} shape={shape} emulate={emulate}", 77)
        assert_same_bits(o_fp8_qdq_torch(o, block, emulate), want, f"torch_qdq block={block}", 77)


@pytest.mark.parametrize("block,D", [(-32, 4096), (48, 96), (True, 64), (8192, 4096), (32, 48)])
def test_block_check_is_the_one_the_layers_use(block, D):
    """check_o_fp8_qdq_block is what the patched layers call at init (and o_fp8_qdq_ as a
    backstop): the same refusals, without a tensor."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import check_o_fp8_qdq_block

    with pytest.raises(ValueError, match="^SGLANG_DSV4_O_FP8_QDQ_BLOCK="):
        check_o_fp8_qdq_block(block, D)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_only_bf16_is_accepted(dtype):
    """bf16 is the only dtype o has before wo_a, and the only one tested: fp16 near its top
    (65504) would overflow (scale 256, q = 256), so other dtypes are refused."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    o = torch.ones(2, 8, 64, dtype=dtype)
    with pytest.raises(ValueError, match="bfloat16"):
        o_fp8_qdq_(o, 32)
    assert torch.equal(o, torch.ones_like(o))


def test_cpu_path_builds_no_tensors_per_call(monkeypatch):
    """The eager path's two fp32 constants are module constants, not a torch.tensor(...) (and a
    .item()) built on every call."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_

    o = make_o(3, 5, 2, 256)
    want = o_fp8_qdq_oracle(bits(o), BLOCK)

    def no_tensor(*a, **k):
        raise AssertionError("torch.tensor called on the CPU path")

    monkeypatch.setattr(torch, "tensor", no_tensor)
    o_fp8_qdq_(o, BLOCK)
    monkeypatch.undo()
    assert_same_bits(o, want, "CPU path", 5)


def test_non_contiguous_last_dim_is_refused():
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    with pytest.raises(ValueError, match="contiguous"):
        o_fp8_qdq_(torch.ones(2, 8, 128, dtype=torch.bfloat16)[..., ::2], 32)


def test_devices_it_never_ran_on_are_refused(monkeypatch):
    """The operator runs on NVIDIA CUDA GPUs only: CPU (under Triton's interpreter too), meta and ROCm
    (read once, at import, as _IS_HIP) are refused with a message naming the switch, not run blind;
    o is left as it was."""
    from kernels.o_fp8_qdq import sglang_o_fp8_qdq as K

    o = torch.ones(2, 8, 64, dtype=torch.bfloat16)
    for interpret in ("0", "1"):
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        with pytest.raises(NotImplementedError, match="^o FP8 QDQ .* not on cpu; unset SGLANG_DSV4_O_FP8_QDQ_BLOCK"):
            K.o_fp8_qdq_(o, 32)
    with pytest.raises(NotImplementedError, match="not on meta; unset SGLANG_DSV4_O_FP8_QDQ_BLOCK"):
        K.o_fp8_qdq_(o.to("meta"), 32)
    monkeypatch.setattr(K, "_IS_HIP", True)
    with pytest.raises(NotImplementedError, match="not on ROCm; unset SGLANG_DSV4_O_FP8_QDQ_BLOCK"):
        K.o_fp8_qdq_(o, 32)
    assert torch.equal(o, torch.ones_like(o))


def test_hardware_conversion_is_chosen_from_sm89(monkeypatch):
    """The hardware e4m3 conversion exists from sm89 (Ada) on; older GPUs take the emulation.
    Checked on the capability lookup itself (no GPU needed)."""
    from kernels.o_fp8_qdq import sglang_o_fp8_qdq as K

    check = K._hw_fp8_supported.__wrapped__
    for cap, want in [((8, 6), False), ((8, 9), True), ((9, 0), True), ((7, 5), False), ((12, 0), True)]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i, cap=cap: cap)
        assert check(0) is want, cap


def test_repeated_cuda_call_checks_once_and_launches_the_same(monkeypatch):
    """The eager launch cost: a CUDA call with a block, D and device seen before runs only O(1)
    attribute checks before the launch (the block check and the capability lookup run on the first
    call only) and launches the same grid and configuration as the first call;
    a new D, T range, emulate or a bad argument still takes the full checks. The T range is the same
    on the first call (which stores the key) and on later ones (which look it up), at 2047 and 2048
    rows too; T=0 launches nothing and a single value (block 1) is launched. CUDA tensors are faked
    (FakeTensorMode), the launch is recorded, so no GPU is needed. (The operator refuses CPU tensors:
    its checked path past the device check runs only here and on a GPU.)"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernels.o_fp8_qdq import sglang_o_fp8_qdq as K

    calls = {"check": 0, "capability": 0}
    launches = []
    real_check = K.check_o_fp8_qdq_block

    def check(block, d):
        calls["check"] += 1
        return real_check(block, d)

    class LaunchSpy:
        def __getitem__(self, grid):
            return lambda *a, **k: launches.append((grid, a[1:], k))

    def capability(i):
        calls["capability"] += 1
        return (9, 0)

    monkeypatch.setattr(K, "check_o_fp8_qdq_block", check)
    monkeypatch.setattr(K, "_o_fp8_qdq_kernel", LaunchSpy())
    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(K, "_LAUNCH_CONFIGS", {}, raising=False)  # a fresh cache
    K._hw_fp8_supported.cache_clear()
    with FakeTensorMode():
        o = torch.empty(2, G, D, dtype=torch.bfloat16, device="cuda")
        assert K.o_fp8_qdq_(o, BLOCK) is o
        first = dict(calls)
        assert first["check"] == first["capability"] == 1, first
        for _ in range(2):
            assert K.o_fp8_qdq_(o, BLOCK) is o
        assert calls == first, f"a repeated call redid checks: {calls} after the first call's {first}"
        assert len(launches) == 3 and launches[0] == launches[1] == launches[2]
        grid, args, kw = launches[0]
        assert grid == (2 * G, D // 1024) and args == (G, D, G * D, D)
        assert kw == {"BLOCK": BLOCK, "CHUNK": 1024, "HW_FP8": True, "num_warps": 4}
        K.o_fp8_qdq_(o, BLOCK, emulate=True)  # another configuration: checked once, then cached
        K.o_fp8_qdq_(o, BLOCK, emulate=True)
        assert calls["check"] == 2 and launches[-1][2]["HW_FP8"] is False
        big = torch.empty(300, G, D, dtype=torch.bfloat16, device="cuda")  # >= 2048 rows
        K.o_fp8_qdq_(big, BLOCK)
        assert calls["check"] == 3 and launches[-1][0] == (300 * G, 1) and launches[-1][2]["CHUNK"] == 4096
        K.o_fp8_qdq_(big, BLOCK)  # the key the first call stored is the one a second call looks up
        assert calls["check"] == 3 and launches[-1] == launches[-2]
        for rows, chunk in ((2048, 4096), (2047, 1024)):  # either side of the large-T configuration:
            edge = torch.empty(rows, 1, D, dtype=torch.bfloat16, device="cuda")  # keys seen before
            K.o_fp8_qdq_(edge, BLOCK)
            assert calls["check"] == 3 and launches[-1][0] == (rows, D // chunk), (rows, launches[-1])
        monkeypatch.setattr(K, "_LAUNCH_CONFIGS", {})  # 2048 rows first: it stores the large-T key
        K.o_fp8_qdq_(torch.empty(2048, 1, D, dtype=torch.bfloat16, device="cuda"), BLOCK)
        K.o_fp8_qdq_(o, BLOCK)
        assert calls["check"] == 5 and launches[-1][2]["CHUNK"] == 1024
        empty = torch.empty(0, G, D, dtype=torch.bfloat16, device="cuda")
        n = len(launches)
        assert K.o_fp8_qdq_(empty, BLOCK) is empty and len(launches) == n  # T=0: nothing launched
        one = torch.empty(1, 1, 1, dtype=torch.bfloat16, device="cuda")  # one value, block 1
        assert K.o_fp8_qdq_(one, 1) is one and len(launches) == n + 1 and launches[-1][0] == (1, 1)
        n = len(launches)
        for bad in (48, True, 8192):  # still refused after the good calls
            with pytest.raises(ValueError, match="^SGLANG_DSV4_O_FP8_QDQ_BLOCK="):
                K.o_fp8_qdq_(o, bad)
        with pytest.raises(ValueError, match="bfloat16"):
            K.o_fp8_qdq_(o.float(), BLOCK)
        with pytest.raises(ValueError, match="contiguous"):
            K.o_fp8_qdq_(torch.empty_strided((2, G, D), (2 * G * D, 2 * D, 2), dtype=torch.bfloat16,
                                             device="cuda"), BLOCK)
        assert len(launches) == n


def test_empty_and_idempotent():
    """T=0 is a no-op; QDQ of a QDQ'd tensor changes nothing (the second scale is never coarser, so
    every value is already on its grid). Blocks that overflowed to inf are zeroed first: inf is
    outside the input contract. (The CPU harness's eager path.)"""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_

    empty = torch.zeros(0, 8, 4096, dtype=torch.bfloat16)
    assert o_fp8_qdq_(empty, 32) is empty
    o, want, seed = case(3)
    once = o_fp8_qdq_(o.clone(), 32)
    assert np.array_equal(bits(once), want)
    blocks = once.view(-1, BLOCK)
    blocks[~torch.isfinite(blocks).all(dim=1)] = 0
    twice = o_fp8_qdq_(once.clone(), 32)
    assert np.array_equal(bits(once), bits(twice)), f"seed {seed}: QDQ of a QDQ'd tensor changed it"


# ---------------------------------------------------------------------------------------------
# Triton interpreter (CPU): the patch file's kernel, emulated rounding


def _interpreter_worker(in_path: str, out_path: str) -> None:
    """Runs the patch file's kernel on every array of in_path (TRITON_INTERPRET=1 must be set before
    triton.jit runs), launched by the CPU harness; writes the results to out_path."""
    import triton

    from kernels.o_fp8_qdq import sglang_o_fp8_qdq as K
    from kernels.o_fp8_qdq import sglang_o_fp8_qdq_cpu as W

    def no_eager(*args, **kwargs):
        raise AssertionError("under TRITON_INTERPRET=1 the harness must run the Triton kernel")

    W._o_fp8_qdq_torch_ = no_eager  # what these tests check is the kernel, not the eager path
    real, warps = K._o_fp8_qdq_kernel, []

    class LaunchSpy:  # records the launch configuration a GPU would get
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                warps.append(kwargs.get("num_warps", 4))
                return real[grid](*args, **kwargs)
            return launch

    K._o_fp8_qdq_kernel = LaunchSpy()
    out = {}
    for k, v in dict(np.load(in_path)).items():
        t = torch.from_numpy(v.view(np.int16)).view(torch.bfloat16).clone()
        if k in ("strided", "strided_ragged"):
            view = t[:, :-1, 32:-32]  # [T, G, D] view of [T, G + 1, D + 64]
            W.o_fp8_qdq_(view, 32, emulate=True)
        elif k.startswith("far_"):  # a view whose last row lies 2^31 elements past its first
            out[k] = _far_view_qdq(W.o_fp8_qdq_, t, k[4:])
            continue
        elif k.startswith("chunk"):  # the kernel itself, at a chunk size the wrapper picks for other T
            chunk = int(k[5:])
            T, G, D = t.shape
            K._o_fp8_qdq_kernel[(T * G, triton.cdiv(D, chunk))](
                t, G, D, t.stride(0), t.stride(1), BLOCK=32, CHUNK=chunk, HW_FP8=False, num_warps=4)
        else:
            W.o_fp8_qdq_(t, 32, emulate=True)
        out[k] = t.view(torch.int16).numpy().view(np.uint16)
    out["num_warps"] = np.array(warps)
    np.savez(out_path, **out)


FAR = 2**30  # elements; (FAR * 2) is past int32 (2^31): 4 GiB of bf16, allocated, never touched


def _far_view_qdq(qdq_, src: torch.Tensor, which: str) -> np.ndarray:
    """QDQ of src [3, 1, 32] ('t': token stride 2^30) or [1, 3, 32] ('g': group stride 2^30) as a view
    of a 4 GiB buffer that is allocated but never touched outside the view (the pages stay virtual),
    so the row at 2^31 elements, where 32-bit offsets wrap (T >= 65,536 rows at G=8, D=4096), is
    reached on CPU in well under a second. Returns the view's bits."""
    buf = torch.empty(2 * FAR + 64, dtype=torch.bfloat16)
    shape, stride = {"t": ((3, 1, 32), (FAR, 32, 1)), "g": ((1, 3, 32), (4 * FAR, FAR, 1))}[which]
    view = buf.as_strided(shape, stride)
    view.copy_(src.reshape(shape))
    qdq_(view, 32, emulate=True)
    got = view.contiguous().view(torch.int16).numpy().view(np.uint16).copy()
    del view, buf
    return got


TS_INTERP = (1,)  # Flash shape; T=3 and 37 with narrow rows (the interpreter runs programs one by one)
STRIDED = dict(T=3, g=4, d=256)
RAGGED = dict(T=3, g=2, d=96)  # D not a power of two: the chunk is 128, the last 32 columns masked
CHUNKED = dict(T=1, g=1, d=4096)
CHUNKS = (128, 1024, 4096)  # 1024: the wrapper's small-T chunk, 4096: its >= 2048-row chunk


@pytest.fixture(scope="module")
def interp_results(tmp_path_factory):
    """Every interpreter input, run in one fresh interpreter with TRITON_INTERPRET=1 (the variable
    has to be set before triton.jit runs; a second, interpreted copy of a module that was already
    imported compiled does not run). Returns {name: (output bits, oracle bits, seed)}."""
    import subprocess

    cases = {f"T{T}": case(T) for T in TS_INTERP}
    cases["ragged"] = case(**RAGGED)
    cases["T3narrow"] = case(3, 2, 256)
    cases["T37narrow"] = case(37, 1, 64)
    cases["D32"] = case(3, 2, 32)  # the wrapper's smallest chunk: one block
    nf = make_non_finite_o()
    cases["non_finite"] = (nf, oracle_bits(nf), NON_FINITE_SEED)
    src, _, seed = case(**STRIDED)
    buf = torch.full((STRIDED["T"], STRIDED["g"] + 1, STRIDED["d"] + 64), -7.0, dtype=torch.bfloat16)
    buf[:, :STRIDED["g"], 32:32 + STRIDED["d"]] = src
    cases["pow2"] = (make_pow2_o(), oracle_bits(make_pow2_o()), POW2_SEED)
    far_src = case(3, 1, 32)
    cases["far_t"] = far_src
    cases["far_g"] = (far_src[0].reshape(1, 3, 32), far_src[1].reshape(1, 3, 32), far_src[2])
    rsrc, _, _ = case(**RAGGED)
    rbuf = torch.full((RAGGED["T"], RAGGED["g"] + 1, RAGGED["d"] + 64), POISON, dtype=torch.bfloat16)
    rbuf[:, :RAGGED["g"], 32:32 + RAGGED["d"]] = rsrc
    arrays = {k: bits(v[0]) for k, v in cases.items()}
    arrays["strided"] = bits(buf)
    arrays["strided_ragged"] = bits(rbuf)
    for c in CHUNKS:
        arrays[f"chunk{c}"] = bits(case(**CHUNKED)[0])
    d = tmp_path_factory.mktemp("interp")
    np.savez(d / "in.npz", **arrays)
    if os.environ.get("TRITON_INTERPRET") == "1":  # this process already interprets (mutation runs)
        _interpreter_worker(str(d / "in.npz"), str(d / "out.npz"))
    else:
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
        p = subprocess.run([sys.executable, __file__, str(d / "in.npz"), str(d / "out.npz")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
    out = dict(np.load(d / "out.npz"))
    res = {k: (out[k], v[1], v[2]) for k, v in cases.items()}
    res["strided"] = (out["strided"], case(**STRIDED)[1], seed)
    res["strided_ragged"] = (out["strided_ragged"], case(**RAGGED)[1], case(**RAGGED)[2])
    for c in CHUNKS:
        res[f"chunk{c}"] = (out[f"chunk{c}"], case(**CHUNKED)[1], case(**CHUNKED)[2])
    res["num_warps"] = out["num_warps"]
    return res


def test_triton_interpreter_launch_config_is_valid_on_a_gpu(interp_results):
    """The interpreter ignores num_warps; a GPU takes only powers of two up to 32 (one per launch)."""
    warps = interp_results["num_warps"].tolist()
    assert len(warps) == len(interp_results) - 1 and all(w in (1, 2, 4, 8, 16, 32) for w in warps)


def _as_bf16(b: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)


@pytest.mark.parametrize("name", [f"T{T}" for T in TS_INTERP] + ["ragged", "T3narrow", "T37narrow", "D32",
                                  "non_finite", "pow2", "far_t", "far_g"])
def test_triton_interpreter_matches_oracle(interp_results, name):
    got, want, seed = interp_results[name]
    assert_same_bits(_as_bf16(got), want, f"Triton (interpreter, emulated) {name}", seed)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_triton_interpreter_every_chunk_size(interp_results, chunk):
    """The kernel at each chunk size the wrapper can choose (4096 is its large-T configuration), on
    the same input: the result must not depend on the chunk."""
    got, want, seed = interp_results[f"chunk{chunk}"]
    assert_same_bits(_as_bf16(got), want, f"Triton kernel CHUNK={chunk}", seed)


def test_triton_interpreter_strided_view(interp_results):
    """o as MQALayer hands it over: a [T, G, D] view of a wider buffer (token stride > G*D, group
    stride > D). Only the view changes; the gaps keep their poison."""
    got, want, seed = interp_results["strided"]
    g, d = STRIDED["g"], STRIDED["d"]
    got_t = _as_bf16(got)
    assert_same_bits(got_t[:, :g, 32:32 + d], want, "Triton strided view", seed)
    mask = torch.ones_like(got_t, dtype=torch.bool)
    mask[:, :g, 32:32 + d] = False
    assert torch.all(got_t[mask] == -7.0)


def test_triton_interpreter_ragged_strided_view_writes_nothing_outside(interp_results):
    """A strided view whose row (D=96) ends inside the kernel's chunk (128): the chunk's tail must be
    masked on the view's D, not on a stride. The gaps hold POISON, which QDQ would change (1.0078125
    -> 1.0), so a store past D (into the gap after each group row) shows up."""
    got, want, seed = interp_results["strided_ragged"]
    g, d = RAGGED["g"], RAGGED["d"]
    got_t = _as_bf16(got)
    assert_same_bits(got_t[:, :g, 32:32 + d], want, "Triton ragged strided view", seed)
    mask = torch.ones_like(got_t, dtype=torch.bool)
    mask[:, :g, 32:32 + d] = False
    bad = int((got_t[mask] != POISON).sum())
    assert bad == 0, f"seed {seed}: {bad} values outside the view were written"
    one = torch.full((1, 1, BLOCK), POISON, dtype=torch.bfloat16)  # the poison is one QDQ changes
    assert o_fp8_qdq_torch(one, BLOCK)[0, 0, 0].item() == 1.0


def test_pick_chunk_covers_the_row_and_block():
    """Whatever chunk the wrapper picks is one the tests above run: a power of two, at least one
    block, and no more than the row needs (so small T spreads over more programs)."""
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import _pick_chunk

    for rows, d in [(1, 4096), (8, 4096), (2047, 4096), (2048, 4096), (10**5, 4096), (5, 96), (5, 32),
                    (2048, 8192), (3, 8192)]:
        c = _pick_chunk(rows, d, BLOCK)
        assert c in CHUNKS + (BLOCK,) and c >= BLOCK and c < 2 * max(d, BLOCK), (rows, d, c)
    # the large-T configuration the GPU tests reach at T=300 (2400 rows), and not below 2048 rows
    assert _pick_chunk(300 * G, D, BLOCK) == 4096 and _pick_chunk(2048, D, BLOCK) == 4096
    assert _pick_chunk(2047, D, BLOCK) == 1024


# ---------------------------------------------------------------------------------------------
# GPU (H200): hardware e4m3 conversion and the emulation, Triton kernel


def _cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the hardware-e4m3 path needs an sm89+ GPU (run on the H200)")


TS_GPU = TS_CPU + (300, 4096)  # 300 x 8 rows >= 2048: the wrapper's large-T chunk


@pytest.mark.gpu
@pytest.mark.parametrize("T", TS_GPU)
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
@pytest.mark.parametrize("emulate", [False, True], ids=["hw", "emulated"])
def test_triton_gpu_non_finite_blocks(emulate):
    """Blocks holding NaN or +-inf on the GPU: NaN (0x7FC0) in full, hardware and emulated."""
    _cuda_or_skip()
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    o = make_non_finite_o()
    x = o.cuda()
    o_fp8_qdq_(x, BLOCK, emulate=emulate)
    torch.cuda.synchronize()
    assert_same_bits(x, o_fp8_qdq_oracle(bits(o), BLOCK), f"Triton GPU, non-finite, emulate={emulate}",
                     NON_FINITE_SEED)


@pytest.mark.gpu
@pytest.mark.parametrize("emulate", [False, True], ids=["cast", "emulated"])
def test_torch_eager_gpu_matches_oracle(emulate):
    _cuda_or_skip()
    o, want, seed = case(37)
    assert_same_bits(o_fp8_qdq_torch(o.cuda(), BLOCK, emulate), want, "torch_qdq on GPU", seed)


@pytest.mark.gpu
@pytest.mark.parametrize("emulate", [False, True], ids=["hw", "emulated"])
def test_triton_gpu_rows_past_int32_offsets(emulate):
    """T = 70,000 tokens at the Flash shape (G=8, D=4096): from token 65,536 (row 524,288) the element
    offset t * G * D passes 2^31, where a 32-bit offset wraps (an illegal access or a wrong row). Every token t holds case(3)'s token t % 3, so the oracle is three tokens'.
    Not run in the session that wrote it (no GPU time left): run with -m gpu on the H200."""
    _cuda_or_skip()
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    src, want, seed = case(3)
    T = 70_000
    idx = torch.arange(T) % 3
    o = src.cuda()[idx.cuda()]  # [T, G, D], 4.6 GB of bf16
    assert (T - 1) * G * D >= 2**31
    o_fp8_qdq_(o, 32, emulate=emulate)
    torch.cuda.synchronize()
    want_t = torch.from_numpy(want.view(np.int16)).cuda()
    for lo in (0, 65_530, T - 3):  # below the wrap, across it, the last rows
        assert_same_bits(o[lo:lo + 3], want[(np.arange(lo, lo + 3) % 3)], f"Triton GPU T={T} rows {lo}..", seed)
    bad = (o.view(torch.int16) != want_t[idx.cuda()]).sum().item()
    assert bad == 0, f"seed {seed}: {bad} values differ over the {T} tokens"


@pytest.mark.gpu
@pytest.mark.parametrize("emulate", [False, True], ids=["hw", "emulated"])
def test_triton_gpu_strided_view_and_cuda_graph(emulate):
    """A strided [T, G, D] view, run inside a captured CUDA graph (capture fails on a host sync)."""
    _cuda_or_skip()
    from kernels.o_fp8_qdq.sglang_o_fp8_qdq import o_fp8_qdq_

    src, want, seed = case(37)
    src = src.cuda()
    T = src.shape[0]
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
    assert_same_bits(view, want, "Triton GPU strided view in a CUDA graph", seed)
    mask = torch.ones_like(buf, dtype=torch.bool)
    mask[:, :G, 64:] = False
    assert torch.all(buf[mask] == -7.0)


if __name__ == "__main__":
    _interpreter_worker(sys.argv[1], sys.argv[2])
