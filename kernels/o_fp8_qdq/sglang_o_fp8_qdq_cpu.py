"""The SGLang patch's o FP8 QDQ operator on CPU tensors, for this project's tests (the project side of
it: none of this is in the patch).

sglang_o_fp8_qdq.py is byte-for-byte the operator the patch adds, and it refuses every device but an
NVIDIA CUDA GPU. To test it without one, `o_fp8_qdq_(o, block, emulate, op=...)` here runs the
operator's own argument checks (`op._check_args`: shape, block, dtype, contiguous last dim) and then:

- a CUDA tensor: the operator itself (`op.o_fp8_qdq_`), unchanged;
- a CPU tensor under Triton's interpreter (TRITON_INTERPRET=1, set before triton.jit runs, i.e.
  before the operator module is imported): the operator's Triton kernel (`op._o_fp8_qdq_kernel`,
  looked up on every call), launched as the operator launches it (`op._pick_chunk`, the same grid,
  num_warps=4), with the fp32 emulation of the e4m3 rounding (the interpreter has no hardware e4m3
  conversion);
- any other CPU tensor: an eager torch path in the kernel's bit-level arithmetic (amax on the bits of
  |x|, ceil_log2 read from the fp32 bits, a block holding NaN or +-inf written as 0x7FC0), with
  torch's e4m3 cast (emulate=False) or the fp32 emulation of the kernel's `_e4m3_rne_fp32`
  (emulate=True);
- anything else (meta, ...): the operator, which refuses it.

`op` is the operator module: by default the project's copy; the regression tests pass the patched
tree's file, loaded on its own.
"""

from __future__ import annotations

import os
import struct

import torch
import triton

from kernels.o_fp8_qdq import sglang_o_fp8_qdq as K

# The operator's constants (fp32 bit patterns), as the eager path uses them.
_FP8_MAX = K.FP8_E4M3_MAX.value
_AMAX_FLOOR_BITS = K._AMAX_FLOOR_BITS.value
_INF_BITS = K._INF_BITS.value
_BF16_NAN_BITS = K._BF16_NAN_BITS.value
_FP8_MAX_INV = struct.unpack("<f", struct.pack("<I", K._FP8_MAX_INV_BITS.value))[0]  # exact in fp32


def _ceil_log2_fp32_bits(r: torch.Tensor) -> torch.Tensor:
    rb = r.view(torch.int32)
    return ((rb >> 23) & 0xFF) - 127 + ((rb & 0x7FFFFF) != 0).to(torch.int32)


def _e4m3_rne_fp32_torch(y: torch.Tensor) -> torch.Tensor:
    """The kernel's `_e4m3_rne_fp32` in torch: fp32 y, |y| <= 448, rounded half to even onto the e4m3
    grid (quantum 2^(e - 3) for normals, 2^-9 for subnormals), in fp32, signed zero kept."""
    bits = y.view(torch.int32)
    sign = bits & -0x80000000
    mag_bits = bits & 0x7FFFFFFF
    e = torch.clamp((mag_bits >> 23) - 127, min=-6)
    quantum = ((e - 3 + 127) << 23).view(torch.float32)
    inv_quantum = ((127 - (e - 3)) << 23).view(torch.float32)
    a = mag_bits.view(torch.float32) * inv_quantum
    f = torch.floor(a)
    frac = a - f
    up = (frac > 0.5) | ((frac == 0.5) & ((f.to(torch.int32) & 1) == 1))
    k = torch.where(up, f + 1.0, f)
    return ((k * quantum).view(torch.int32) | sign).view(torch.float32)


def _o_fp8_qdq_torch_(o: torch.Tensor, block: int, emulate: bool) -> torch.Tensor:
    T, G, D = o.shape
    x = o.float().reshape(T, G, D // block, block)
    # as in the kernel: amax on the bits of |x|, which also flags NaN and inf
    amax_bits = (x.view(torch.int32) & 0x7FFFFFFF).amax(dim=-1, keepdim=True)
    amax_bits = torch.clamp(amax_bits, min=_AMAX_FLOOR_BITS)
    non_finite = amax_bits >= _INF_BITS
    e = _ceil_log2_fp32_bits(amax_bits.view(torch.float32) * _FP8_MAX_INV)
    s = ((e + 127) << 23).view(torch.float32)
    inv_s = ((127 - e) << 23).view(torch.float32)
    y = torch.clamp(x * inv_s, -_FP8_MAX, _FP8_MAX)
    if emulate:
        q = _e4m3_rne_fp32_torch(y)
    else:
        q = y.to(torch.float8_e4m3fn).float()
    out = (q * s).to(torch.bfloat16).view(torch.int16)
    out = torch.where(non_finite, _BF16_NAN_BITS, out)
    o.copy_(out.view(torch.bfloat16).reshape(T, G, D))
    return o


def _interpreted_kernel_(op, o: torch.Tensor, block: int) -> torch.Tensor:
    T, G, D = o.shape
    chunk = op._pick_chunk(T * G, D, block)
    op._o_fp8_qdq_kernel[(T * G, triton.cdiv(D, chunk))](
        o, G, D, o.stride(0), o.stride(1), BLOCK=block, CHUNK=chunk, HW_FP8=False, num_warps=4)
    return o


def o_fp8_qdq_(o: torch.Tensor, block: int = 32, emulate: bool = False, *, op=K) -> torch.Tensor:
    """The operator `op.o_fp8_qdq_` on CUDA tensors; on CPU tensors its argument checks, then its
    kernel under TRITON_INTERPRET=1 (emulated rounding) or the eager path. In place; returns o."""
    if o.device.type != "cpu":
        return op.o_fp8_qdq_(o, block, emulate)
    op._check_args(o, block)
    if o.numel() == 0:
        return o
    if os.environ.get("TRITON_INTERPRET") == "1":
        return _interpreted_kernel_(op, o, block)
    return _o_fp8_qdq_torch_(o, block, emulate)
