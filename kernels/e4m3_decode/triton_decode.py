"""Triton E4M3 decode helpers and the fp8_ds_mla gather-and-dequantize kernel.

Two decodes of an e4m3fn byte to float32:
- e4m3_to_f32_manual: integer and float32 arithmetic only, so it lowers where the compiler has no
  FP8 conversion (DTK Triton on gfx936). It does not use exp2: an exp2-based decode was 54% slower
  on an H200 (docs/background.md, "Benchmark anchors").
- e4m3_to_f32_hw: Triton's fp8 bitcast + convert (needs FP8 conversion support: sm_89+, gfx942+).
Both return NaN for S.1111.111; the kernel keeps NaN (upstream's `where(k == k, k, 0)` hides a
corrupt cache, which is the opposite of what a reference reader is for).

The gather kernel reads the block-packed cache with the writer's addresses (kernels/fp8_ds_mla/
layout.py) and writes float32 [N, 512]. It treats each token as 8 rows of 64 output values: rows
0..6 are the NoPE tiles (64 e4m3 bytes x one UE8M0 scale each), row 7 is the 64 bf16 RoPE values.
That makes the output one dense [N*8, 64] array and each scale a per-row scalar.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fp8_ds_mla import layout as L
from ..fp8_ds_mla.naive import block_view


@triton.jit
def e4m3_to_f32_manual(x_u8):
    """e4m3fn byte -> float32 from shifts, adds and one multiply-add; exact for all 256 codes."""
    x = x_u8.to(tl.uint32)
    mag = x & 0x7F
    sign = (x >> 7) << 31
    # Move exponent and mantissa into the float32 fields and rebias 7 -> 127 (add 120 << 23):
    # exact for every normal code.
    f = ((mag << 20) + (120 << 23)).to(tl.float32, bitcast=True)
    # A subnormal code (exponent 0, value m/8 * 2^-6) came out as (1 + m/8) * 2^-7, and
    # m/8 * 2^-6 = 2f - 2^-6 exactly. This avoids float32 denormals, which some targets flush.
    f = tl.where(mag < 8, f * 2.0 - 0.015625, f)
    f = tl.where(mag == 0x7F, float("nan"), f)
    return (f.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def e4m3_to_f32_hw(x_u8):
    """e4m3fn byte -> float32 with the target's FP8 conversion."""
    return x_u8.to(tl.float8e4nv, bitcast=True).to(tl.float32)


@triton.jit
def ue8m0_to_f32(b_u8):
    """UE8M0 byte -> float32 2^(b-127) from bits; 0 -> 2^-127 (a float32 denormal), 0xFF -> NaN."""
    b = b_u8.to(tl.uint32)
    bits = tl.where(b == 0, 0x00400000, b << 23)
    bits = tl.where(b == 0xFF, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _decode_bytes_kernel(x_ptr, out_ptr, n, MANUAL_DECODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    if MANUAL_DECODE:
        y = e4m3_to_f32_manual(x)
    else:
        y = e4m3_to_f32_hw(x)
    tl.store(out_ptr + offs, y, mask=mask)


def decode_bytes(codes: torch.Tensor, manual_decode: bool = True,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise e4m3fn decode of a uint8 tensor through one of the two Triton helpers.

    `out` (optional): a contiguous float32 tensor with codes.numel() elements to write into."""
    flat = codes.reshape(-1).contiguous()
    if out is None:
        out = torch.empty(flat.shape, dtype=torch.float32, device=codes.device)
    elif out.dtype != torch.float32 or out.numel() != flat.numel() or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous float32 tensor of {flat.numel()} elements")
    block = 1024
    _decode_bytes_kernel[(triton.cdiv(flat.numel(), block),)](
        flat, out, flat.numel(), MANUAL_DECODE=manual_decode, BLOCK=block)
    return out.reshape(codes.shape)


@triton.jit
def _gather_dequant_kernel(
    cache_ptr,  # uint8, block b starts at cache_ptr + b * block_stride
    slots_ptr,  # int64 [n_slots]
    out_ptr,  # float32 [n_slots, 512], dense
    n_slots,
    block_stride,  # bytes; even (RoPE is read as bf16)
    BLOCK_SIZE: tl.constexpr,  # tokens per cache block
    TOKENS: tl.constexpr,  # tokens per program
    MANUAL_DECODE: tl.constexpr,
):
    ROWS: tl.constexpr = TOKENS * 8
    row = tl.arange(0, ROWS)
    col = tl.arange(0, 64)
    tok = tl.program_id(0).to(tl.int64) * TOKENS + row // 8
    k = row % 8  # 0..6 NoPE tile, 7 RoPE
    valid = tok < n_slots
    slot = tl.load(slots_ptr + tok, mask=valid, other=0).to(tl.int64)
    block = slot // BLOCK_SIZE
    pos = slot % BLOCK_SIZE
    base = block * block_stride  # int64: caches are tens of GB
    data = base + pos * 576
    is_nope = valid & (k < 7)
    is_rope = valid & (k == 7)

    codes = tl.load(cache_ptr + (data + k * 64)[:, None] + col[None, :],
                    mask=is_nope[:, None], other=0)
    scale_byte = tl.load(cache_ptr + base + BLOCK_SIZE * 576 + pos * 8 + k, mask=is_nope, other=127)
    if MANUAL_DECODE:
        nope = e4m3_to_f32_manual(codes)
    else:
        nope = e4m3_to_f32_hw(codes)
    nope = nope * ue8m0_to_f32(scale_byte)[:, None]

    # bf16 -> float32 is the bf16 bits in the high half: exact, denormals included, and it needs no
    # bf16 support in the target (the interpreter's bf16 convert gets denormals wrong).
    rope_ptr = cache_ptr.to(tl.pointer_type(tl.uint16))
    rope_bits = tl.load(rope_ptr + ((data + 448) // 2)[:, None] + col[None, :],
                        mask=is_rope[:, None], other=0)
    rope = (rope_bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True)

    out = tl.where((k == 7)[:, None], rope, nope)
    tl.store(out_ptr + (tok * 512 + k * 64)[:, None] + col[None, :], out, mask=valid[:, None])


def gather_dequantize(cache: torch.Tensor, slots: torch.Tensor, block_size: int = L.DEFAULT_BLOCK_SIZE,
                      manual_decode: bool = True, out: torch.Tensor | None = None,
                      tokens_per_program: int = 4, num_warps: int = 4) -> torch.Tensor:
    """float32 [N, 512] for the given slots; same values, bit for bit, as fp8_ds_mla.naive.dequantize.

    Defaults are the best of the H200 sweep (docs/kernels/vllm-kernels.md): 4 tokens (2,048 output
    values) per program, 4 warps. Slots are not range-checked here (the reference does that; a
    kernel cannot afford the host sync)."""
    _check_launch_args(block_size, tokens_per_program, num_warps)
    raw = block_view(cache, block_size)
    if raw.shape[0] > 1 and raw.stride(0) % 2:
        raise ValueError("block stride must be even: RoPE is read as bf16")
    if raw.data_ptr() % 2:
        raise ValueError("cache base must be 2-byte aligned: RoPE is read as bf16")
    slots = slots.to(device=raw.device, dtype=torch.int64).contiguous()
    n = slots.numel()
    if out is None:
        out = torch.empty((n, L.KV_DIM), dtype=torch.float32, device=raw.device)
    elif (tuple(out.shape) != (n, L.KV_DIM) or out.dtype != torch.float32 or not out.is_contiguous()
          or out.device != raw.device):
        raise ValueError(f"out must be a contiguous float32 [{n}, {L.KV_DIM}] tensor on {raw.device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")
    if n == 0:
        return out
    _launch(raw, slots, out, block_size, manual_decode, tokens_per_program, num_warps)
    return out


def _is_power_of_two(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and not n & (n - 1)


def _check_launch_args(block_size, tokens_per_program, num_warps) -> None:
    """Fail with the argument named, before Triton does: a program covers tokens_per_program * 8
    rows, which tl.arange needs as a power of two, and Triton takes only power-of-two warp counts."""
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if not _is_power_of_two(tokens_per_program):
        raise ValueError(f"tokens_per_program must be a power of two (1, 2, 4, ...), got "
                         f"{tokens_per_program!r}")
    if not _is_power_of_two(num_warps):
        raise ValueError(f"num_warps must be a power of two (1, 2, 4, ...), got {num_warps!r}")


def _launch(raw, slots, out, block_size, manual_decode, tokens_per_program, num_warps):
    """Launch on validated arguments; returns Triton's compiled kernel (the bench reads its asm)."""
    n = slots.numel()
    grid = (triton.cdiv(n, tokens_per_program),)
    return _gather_dequant_kernel[grid](
        raw, slots, out, n, raw.stride(0),
        BLOCK_SIZE=block_size, TOKENS=tokens_per_program, MANUAL_DECODE=manual_decode,
        num_warps=num_warps)
