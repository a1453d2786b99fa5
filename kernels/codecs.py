"""Bit-exact numpy float64 oracles for the small floating-point formats the patches touch.

Every other kernel in kernels/ is checked against these, so they are written from the format
definitions alone (no torch, no Triton) and tested against torch's own dtypes.

Formats
- E4M3 (OCP e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits. Exponent 0 is subnormal
  (m/8 * 2^-6). S.1111.111 is the only NaN; there is no infinity; max finite 448.
- UE8M0: 8-bit biased exponent, value 2^(b-127); 0xFF is NaN. No sign, no zero.
- UE4M3: an e4m3fn byte with the sign bit clear, used as the NVFP4 block scale.
- E2M1 (FP4): 1 sign, 2 exponent (bias 1), 1 mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
  No NaN, no infinity. One value per nibble; packed two per byte, element 0 in the low nibble.

Rounding is always computed on the exact float64 value. torch converts float64 tensors to fp8 through
float32 first, so for float64 inputs that are not float32-representable torch can double-round a value
sitting just off a tie; pass `x.astype(np.float32)` to reproduce torch exactly.
"""

from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0
E2M1_MAX = 6.0
UE8M0_NAN = 0xFF
E4M3_NAN = 0x7F  # positive NaN pattern; the sign bit is kept on top of it

_E4M3_MIN_NORMAL_EXP = -6  # 2^-6, code 0x08
_E4M3_MANTISSA_BITS = 3


def _build_e4m3_table() -> np.ndarray:
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    subnormal = man / 8.0 * 2.0**-6
    normal = (1.0 + man / 8.0) * np.exp2(exp - 7.0)
    mag = np.where(exp == 0, subnormal, normal)
    mag = np.where((exp == 0xF) & (man == 0x7), np.nan, mag)
    return sign * mag


_E4M3_TABLE = _build_e4m3_table()
_E4M3_TABLE.flags.writeable = False


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """uint8 e4m3fn codes -> float64 values (0x7F/0xFF -> NaN, 0x80 -> -0.0)."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"e4m3 codes must be uint8, got {codes.dtype}")
    return _E4M3_TABLE[codes]


def e4m3_encode(x, saturate: bool = True) -> np.ndarray:
    """float -> uint8 e4m3fn code, round to nearest even on the e4m3 grid.

    Signed zero is kept (values that round to zero keep their sign, as torch does). NaN -> 0x7F with
    the input's sign bit (0xFF for -NaN), as torch does.
    Out of range (a rounded magnitude above 448, which means |x| > 464, or +-inf):
      saturate=True  -> +-448 (0x7E/0xFE): what torch 2.13's `.to(float8_e4m3fn)` does (checked
                        here), and what scaled-quantization writers get by clamping first.
      saturate=False -> NaN (0x7F/0xFF): the OCP non-saturating conversion (CUDA __NV_NOSAT, and
                        torch releases whose cast turned overflow into NaN).
    Magnitudes in (448, 464] round to 448 in both modes (464 is a tie and 448's mantissa is even).
    """
    x = np.asarray(x, dtype=np.float64)
    neg = np.signbit(x)
    a = np.abs(x)
    nan = np.isnan(a)
    inf = np.isinf(a)
    finite_a = np.where(nan | inf, 0.0, a)

    # floor(log2 a) from frexp (exact); below 2^-6 the grid is the uniform subnormal grid 2^-9.
    _, e = np.frexp(finite_a)
    grid_exp = np.maximum(e - 1, _E4M3_MIN_NORMAL_EXP) - _E4M3_MANTISSA_BITS
    # a / 2^k is exact, so np.rint (round half to even) does the whole rounding.
    q_units = np.rint(np.ldexp(finite_a, -grid_exp))
    q = np.ldexp(q_units, grid_exp)

    overflow = inf | (q > E4M3_MAX)
    q = np.where(overflow, E4M3_MAX, q)

    # Code of a grid value: subnormals (and exactly 2^-6) are q / 2^-9, which continues into the
    # normal codes at 0x08; normals are biased exponent and mantissa.
    _, qe = np.frexp(q)
    q_exp = qe - 1
    normal = q >= 2.0**_E4M3_MIN_NORMAL_EXP
    man = np.where(normal, np.ldexp(q, -q_exp) * 8 - 8, 0).astype(np.int64)
    normal_code = ((q_exp + 7) << 3) | man
    sub_code = np.ldexp(q, 9).astype(np.int64)
    code = np.where(normal, normal_code, sub_code)

    if not saturate:
        code = np.where(overflow, E4M3_NAN, code)
    code = np.where(nan, E4M3_NAN, code)
    code = code | np.where(neg, 0x80, 0)
    return code.astype(np.uint8)


def e4m3_round(x, saturate: bool = True) -> np.ndarray:
    """x rounded onto the e4m3 grid, as float64 (decode(encode(x)))."""
    return e4m3_decode(e4m3_encode(x, saturate=saturate))


# ---------------------------------------------------------------- UE8M0


def ue8m0_decode(b) -> np.ndarray:
    """uint8 UE8M0 -> float64 2^(b-127); 0xFF -> NaN. Code 0 is 2^-127 (there is no zero)."""
    b = np.asarray(b)
    if b.dtype != np.uint8:
        raise TypeError(f"ue8m0 codes must be uint8, got {b.dtype}")
    out = np.ldexp(1.0, b.astype(np.int64) - 127)
    return np.where(b == UE8M0_NAN, np.nan, out)


def ue8m0_encode(x, rounding: str = "ceil") -> np.ndarray:
    """float -> uint8 UE8M0 exponent byte.

    rounding="ceil" (the default, the scale rule of MX/DeepSeek writers): the smallest power of two
      >= x, so x / scale never leaves the target range. Powers of two map exactly. x <= 2^-127
      (including 0) -> 0; x > 2^127 -> 0xFF (no finite code is large enough); NaN/inf -> 0xFF.
      Negative x raises ValueError: a scale has no sign.
    rounding="torch": torch's `.to(torch.float8_e8m0fnu)`: x is first rounded to float32, the sign
      is ignored, then the float32 exponent is rounded to nearest with ties to even on the *linear*
      significand: significand >= 1.5 rounds up (1.5 itself too, because a normal's implied bit is
      odd); a float32 subnormal rounds up to 2^-126 only above 2^-127, zero -> 0, NaN/inf -> 0xFF,
      and rounding up past 2^127 gives 0xFF. This differs from "ceil": 1.25 -> 1, not 2.
    """
    if rounding == "ceil":
        return _ue8m0_encode_ceil(x)
    if rounding == "torch":
        return _ue8m0_encode_torch(x)
    raise ValueError(f"rounding must be 'ceil' or 'torch', got {rounding!r}")


def _ue8m0_encode_ceil(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if np.any(x < 0):
        raise ValueError("ue8m0_encode(rounding='ceil'): negative scale")
    bad = ~np.isfinite(x)
    xs = np.where(bad | (x == 0), 1.0, x)
    m, e = np.frexp(xs)  # xs = m * 2^e, m in [0.5, 1)
    ceil_log2 = np.where(m == 0.5, e - 1, e)
    b = ceil_log2 + 127
    b = np.where(x == 0, 0, b)
    out = np.where(b < 0, 0, b)
    out = np.where((b > 254) | bad, UE8M0_NAN, out)
    return out.astype(np.uint8)


def _ue8m0_encode_torch(x) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    exponent = (bits >> 23) & 0xFF
    guard = (bits & 0x400000) != 0
    round_bit = (bits & 0x200000) != 0
    sticky = (bits & 0x1FFFFF) != 0
    lsb = exponent > 0
    round_up = guard & (round_bit | sticky | lsb)
    out = np.where(exponent == 0xFF, 0xFF, exponent + round_up)
    return out.astype(np.uint8)


# ---------------------------------------------------------------- UE4M3 (NVFP4 block scale)


def ue4m3_decode(codes) -> np.ndarray:
    """uint8 UE4M3 codes -> float64. A set sign bit is not a valid block scale: ValueError.

    0x7F decodes to NaN (the e4m3fn NaN); callers that validate scales should check for it."""
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"ue4m3 codes must be uint8, got {codes.dtype}")
    if np.any(codes & 0x80):
        raise ValueError("ue4m3_decode: code with the sign bit set is not a UE4M3 scale")
    return _E4M3_TABLE[codes]


def ue4m3_encode(x) -> np.ndarray:
    """Non-negative float -> UE4M3 code (RNE on the e4m3 grid, saturating at 448).

    Negative values and NaN raise ValueError: a block scale is positive. -0.0 encodes as +0 (0x00)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(x)):
        raise ValueError("ue4m3_encode: NaN scale")
    if np.any(x < 0):
        raise ValueError("ue4m3_encode: negative scale")
    return e4m3_encode(np.abs(x), saturate=True)


# ---------------------------------------------------------------- E2M1 (FP4)

_E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1_decode(nibbles) -> np.ndarray:
    """uint8 nibbles (0..15, one value each) -> float64. Bit 3 is the sign (0x8 -> -0.0)."""
    n = np.asarray(nibbles)
    if n.dtype != np.uint8:
        raise TypeError(f"e2m1 nibbles must be uint8, got {n.dtype}")
    if np.any(n > 0xF):
        raise ValueError("e2m1_decode: value above 0xF; unpack bytes with e2m1_unpack first")
    mag = _E2M1_MAGNITUDES[n & 0x7]
    return np.where(n & 0x8, -mag, mag)


def e2m1_encode(x) -> np.ndarray:
    """float -> uint8 nibble, round to nearest even on the E2M1 grid, saturating at +-6.

    Grid step is 0.5 below 2, 1 in [2, 4), 2 in [4, 6]; ties go to the even code (0.25 -> 0,
    0.75 -> 1, 2.5 -> 2, 5 -> 4). Signed zero kept. +-inf saturates to +-6; NaN raises ValueError
    (E2M1 has no NaN)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(x)):
        raise ValueError("e2m1_encode: NaN has no E2M1 code")
    neg = np.signbit(x)
    a = np.minimum(np.abs(x), E2M1_MAX)
    _, e = np.frexp(a)
    grid_exp = np.maximum(e - 1, 0) - 1  # one mantissa bit; subnormal step 0.5 below 1
    q = np.ldexp(np.rint(np.ldexp(a, -grid_exp)), grid_exp)
    q = np.minimum(q, E2M1_MAX)
    code = np.searchsorted(_E2M1_MAGNITUDES, q)  # q is exactly on the grid
    return (code | np.where(neg, 0x8, 0)).astype(np.uint8)


def e2m1_pack(nibbles) -> np.ndarray:
    """[..., 2k] nibbles -> [..., k] bytes; element 2i in the low nibble, 2i+1 in the high."""
    n = np.asarray(nibbles, dtype=np.uint8)
    if n.shape[-1] % 2:
        raise ValueError("e2m1_pack: last dimension must be even")
    return (n[..., 0::2] & 0xF) | ((n[..., 1::2] & 0xF) << 4)


def e2m1_unpack(packed) -> np.ndarray:
    """[..., k] bytes -> [..., 2k] nibbles (inverse of e2m1_pack)."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty(p.shape[:-1] + (p.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out
