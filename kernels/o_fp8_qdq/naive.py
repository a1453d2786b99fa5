"""Float64/numpy oracle of the o FP8 QDQ (the arithmetic is in docs/background.md).

For each block of `block` values along each group's row of o [T, G, D]:

    amax = max(max |x| (fp32), float32(1e-4))
    r    = float32(amax * float32(1/448))          # one fp32 multiply, round to nearest even
    e    = (exponent bits of r) - 127, +1 if r's mantissa bits are non-zero
    s    = 2^e
    q    = e4m3_round(clamp(x / s, -448, 448))     # RNE onto the e4m3 grid, signed zero kept
    o    = bf16(fp32(q * s))                         # +-inf where fp32 overflows; RNE to bf16

Everything except the one fp32 product is done exactly in float64 (x / s and q * s are exact:
s is a power of two). The e4m3 rounding is kernels/codecs.py's `e4m3_round`; the bf16 rounding is
done here on the float64 bits. No torch, no Triton.

Non-finite inputs follow the reference's arithmetic: a block holding NaN or +-inf has amax NaN or
inf, so r and s = 2^ceil(log2 r) are NaN or inf too, and every value of the block comes out NaN
(x / s * s is 0 * inf, inf / inf or NaN). The bits of that NaN are not meaningful (torch's own bf16
cast gives 0x7FC0 or 0xFFFF depending on the code path), so every path of the QDQ writes the
canonical quiet NaN 0x7FC0, and so does this oracle.
"""

from __future__ import annotations

import numpy as np

from ..codecs import e4m3_round

FP8_MAX = 448.0
FP8_MAX_INV_F32 = np.float32(1.0 / 448.0)
AMAX_FLOOR_F32 = np.float32(1e-4)
BF16_NAN = 0x7FC0  # the bits every path writes for a NaN result


def bf16_bits_to_f64(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float64 (exact; a signalling NaN comes back quiet)."""
    f32 = (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    with np.errstate(invalid="ignore"):  # the cast of a signalling NaN
        return f32.astype(np.float64)


def f64_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float64 -> uint16 bf16 bits, round to nearest even (via an exact float32 when possible).

    Values here are q * s with q on the e4m3 grid (4 significant bits) and s a power of two, so the
    float32 step is exact and only the float32 -> bf16 step can round; it is done on the bits. The one
    exception is overflow: near the top of the bf16 range q * s can reach 2^128, which float32
    arithmetic (the reference's `q * s` in fp32) turns into +-inf, and so does this.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow and NaN are handled below
        f32 = x.astype(np.float32)
    # float32 rounds to nearest: |x| >= 2^128 - 2^103 overflows; below that x must be exact.
    overflow = np.abs(x) >= np.float64(2.0**128 - 2.0**103)
    f32 = np.where(overflow, np.copysign(np.float32(np.inf), x).astype(np.float32), f32)
    exact = overflow | (f32.astype(np.float64) == x) | np.isnan(x)
    if not np.all(exact):
        raise ValueError("value not exactly representable in float32; oracle assumption broken")
    b = f32.view(np.uint32).astype(np.uint64)
    nan = np.isnan(f32)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    out = np.where(nan, (b >> 16) | 0x40, rounded).astype(np.uint16)
    return out


def ceil_log2_f32_bits(r: np.ndarray) -> np.ndarray:
    """ceil(log2(r)) for positive normal float32 r, read from its float32 bits."""
    r = np.asarray(r, dtype=np.float32)
    bits = r.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int64) - 127
    return e + ((bits & 0x7FFFFF) != 0).astype(np.int64)


def block_scales(x: np.ndarray, block: int) -> np.ndarray:
    """x float64 [..., D] -> float64 scales s [..., D // block]."""
    xb = x.reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax = np.abs(xb).max(axis=-1).astype(np.float32)  # bf16 values: exact in fp32
    amax = np.maximum(amax, AMAX_FLOOR_F32)
    r = (amax * FP8_MAX_INV_F32).astype(np.float32)  # one fp32 multiply (numpy: IEEE RNE)
    finite = np.isfinite(r)
    s = np.ldexp(1.0, ceil_log2_f32_bits(np.where(finite, r, np.float32(1))))
    return np.where(finite, s, r)  # 2^ceil(log2 r) of r = inf or NaN is r itself


def o_fp8_qdq_oracle(o_bits: np.ndarray, block: int = 32) -> np.ndarray:
    """o as uint16 bf16 bits [T, G, D] -> QDQ'd o as uint16 bf16 bits (same shape)."""
    o_bits = np.asarray(o_bits, dtype=np.uint16)
    T, G, D = o_bits.shape
    if D % block:
        raise ValueError(f"D={D} is not a multiple of block={block}")
    x = bf16_bits_to_f64(o_bits)
    s = block_scales(x, block)
    xb = x.reshape(T, G, D // block, block)
    with np.errstate(invalid="ignore"):  # blocks holding NaN or inf: NaN, as in the reference
        y = np.clip(xb / s[..., None], -FP8_MAX, FP8_MAX)  # exact: s is a power of two
        q = e4m3_round(y, saturate=True)
        out = (q * s[..., None]).reshape(T, G, D)
    return np.where(np.isnan(out), BF16_NAN, f64_to_bf16_bits(out)).astype(np.uint16)


def o_fp8_qdq_oracle_f64(o_bits: np.ndarray, block: int = 32) -> np.ndarray:
    """Same, returned as float64 values."""
    return bf16_bits_to_f64(o_fp8_qdq_oracle(o_bits, block))
