"""Reference E4M3 byte decode for the Triton helpers: the float64 oracle, narrowed to float32.

Every e4m3fn value is exactly representable in float32, so the float32 result is the oracle's
value with no rounding; NaN codes stay NaN."""

from __future__ import annotations

import numpy as np

from ..codecs import e4m3_decode


def e4m3_to_f32_reference(codes: np.ndarray) -> np.ndarray:
    """uint8 codes -> float32 values, bit-exact (0x80 -> -0.0; 0x7F/0xFF -> NaN)."""
    return e4m3_decode(codes).astype(np.float32)
