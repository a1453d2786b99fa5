"""PyTorch reference writer and reader for the fp8_ds_mla cache (CPU and CUDA).

This is the oracle every faster reader is checked against, and it is itself checked byte for byte
against a numpy writer built on kernels.codecs (tests/kernels/test_fp8_ds_mla.py). Layout: layout.py.

Writer scale rule (per 64 NoPE values, as the vLLM C++ writer computes it):
    amax  = max |x| over the 64 values, in float32 (NaN values do not take part, as with fmaxf)
    s     = max(amax / 448, FLT_MIN)                      (float32 division)
    scale = 2^ceil(log2(s))                                (smallest power of two >= s)
    byte  = log2(scale) + 127                              (UE8M0)
    code  = e4m3(clamp(x / scale, -448, 448))              (round to nearest even; x / scale is exact)
ceil(log2) is taken exactly here (float32 exponent, +1 when the mantissa is non-zero). A writer that
uses log2f() can differ only for float32 inputs whose s lies within float32 rounding of a power of
two; for bf16 inputs (the model path) the two agree.
NaN NoPE values are stored as the e4m3 NaN code (sign kept). Infinite NoPE values are refused: what
the C++ writer stores for them is not part of the format, and an oracle must not invent it.
RoPE is stored as bf16 (float32 input is rounded to nearest even). The pad byte is written as 0.
"""

from __future__ import annotations

import torch

from . import layout as L

_FLT_MIN = 2.0**-126


def block_view(cache: torch.Tensor, block_size: int = L.DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """A [num_blocks, block_size*584] uint8 view of the cache that keeps the allocator's block stride.

    Accepts the logical [num_blocks, block_size, 584] view, a [num_blocks, >= block_size*584] byte
    view, or any view whose dim 0 walks blocks and whose bytes inside a block are dense. Never copies.
    """
    if cache.dtype != torch.uint8:
        cache = cache.view(torch.uint8)
    if cache.dim() < 2:
        raise ValueError("cache needs a block dimension first")
    need = L.block_bytes(block_size)
    # The bytes after dim 0 must be one dense run, as the writer addresses them.
    inner_shape, inner_stride = cache.shape[1:], cache.stride()[1:]
    expected = 1
    for size, stride in reversed(list(zip(inner_shape, inner_stride))):
        if size != 1 and stride != expected:
            raise ValueError(f"cache bytes inside a block are not dense: shape {tuple(cache.shape)} "
                             f"stride {cache.stride()}")
        expected *= size
    if expected < need:
        raise ValueError(f"a block holds {expected} bytes, the layout needs {need} "
                         f"(block_size={block_size})")
    if cache.shape[0] > 1 and cache.stride(0) < need:
        raise ValueError(f"block stride {cache.stride(0)} < {need} bytes")
    return cache.as_strided((cache.shape[0], need), (cache.stride(0), 1), cache.storage_offset())


def _split_slots(slots: torch.Tensor, block_size: int, num_blocks: int):
    slots = slots.to(torch.int64)
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= num_blocks * block_size):
        raise ValueError("slot outside the cache")
    return slots // block_size, slots % block_size


def _data_index(pos: torch.Tensor, block_size: int) -> torch.Tensor:
    cols = torch.arange(L.TOKEN_DATA_BYTES, device=pos.device)
    return pos[:, None] * L.TOKEN_DATA_BYTES + cols[None, :]


def _scale_index(pos: torch.Tensor, block_size: int) -> torch.Tensor:
    cols = torch.arange(L.SCALE_BYTES, device=pos.device)
    return block_size * L.TOKEN_DATA_BYTES + pos[:, None] * L.SCALE_BYTES + cols[None, :]


def _ceil_log2(s: torch.Tensor) -> torch.Tensor:
    mantissa, exponent = torch.frexp(s)  # s = mantissa * 2^exponent, mantissa in [0.5, 1)
    return torch.where(mantissa == 0.5, exponent - 1, exponent)


def quantize_nope(nope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, 448] float -> (e4m3 codes uint8 [N, 448], UE8M0 scale bytes uint8 [N, 7])."""
    x = nope.float().reshape(-1, L.NUM_TILES, L.TILE)
    if torch.isinf(x).any():
        raise ValueError("fp8_ds_mla.encode: infinite NoPE value (the writer's result is undefined)")
    amax = torch.where(torch.isnan(x), 0.0, x.abs()).amax(dim=-1)
    s = torch.clamp_min(amax / 448.0, _FLT_MIN)
    exp = _ceil_log2(s)
    scale = torch.ldexp(torch.ones_like(s), exp)
    q = torch.clamp(x / scale[..., None], -448.0, 448.0)  # NaN passes through clamp
    codes = q.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1, L.NOPE_DIM)
    return codes, (exp + 127).to(torch.uint8)


def encode(cache: torch.Tensor, slot_mapping: torch.Tensor, kv: torch.Tensor,
           block_size: int = L.DEFAULT_BLOCK_SIZE) -> None:
    """Write kv [N, 512] (448 NoPE + 64 RoPE) into the cache at slot_mapping, in place.

    Slots < 0 are padding and are skipped, as in vLLM. Bytes of other slots are not touched.
    """
    if kv.dim() != 2 or kv.shape[1] != L.KV_DIM:
        raise ValueError(f"kv must be [N, {L.KV_DIM}], got {tuple(kv.shape)}")
    raw = block_view(cache, block_size)
    keep = slot_mapping >= 0
    slots, kv = slot_mapping[keep], kv[keep]
    block, pos = _split_slots(slots, block_size, raw.shape[0])

    codes, scale_bytes = quantize_nope(kv[:, :L.NOPE_DIM])
    rope = kv[:, L.NOPE_DIM:].to(torch.bfloat16).contiguous().view(torch.uint8)
    pad = torch.zeros_like(scale_bytes[:, :1])
    data = torch.cat([codes, rope], dim=1)
    scales = torch.cat([scale_bytes, pad], dim=1)
    raw[block[:, None], _data_index(pos, block_size)] = data
    raw[block[:, None], _scale_index(pos, block_size)] = scales


def token_bytes(cache: torch.Tensor, slots: torch.Tensor, block_size: int = L.DEFAULT_BLOCK_SIZE):
    """(data uint8 [N, 576], scales uint8 [N, 8]) of each slot, read with the writer's addresses."""
    raw = block_view(cache, block_size)
    block, pos = _split_slots(slots, block_size, raw.shape[0])
    data = raw[block[:, None], _data_index(pos, block_size)]
    scales = raw[block[:, None], _scale_index(pos, block_size)]
    return data, scales


def nope_codes(cache, slots, block_size: int = L.DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """uint8 [N, 448] e4m3 codes."""
    return token_bytes(cache, slots, block_size)[0][:, :L.NOPE_DIM]


def scales(cache, slots, block_size: int = L.DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """uint8 [N, 7] UE8M0 scale bytes (the pad byte left out)."""
    return token_bytes(cache, slots, block_size)[1][:, :L.NUM_TILES]


def rope(cache, slots, block_size: int = L.DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """bf16 [N, 64] RoPE values."""
    data = token_bytes(cache, slots, block_size)[0]
    return data[:, L.NOPE_DIM:].contiguous().view(torch.bfloat16)


def ue8m0_to_float(b: torch.Tensor) -> torch.Tensor:
    """UE8M0 bytes -> float32 2^(b-127), built from bits (exact; 0 -> 2^-127, 0xFF -> NaN)."""
    bits = b.to(torch.int32) << 23
    bits = torch.where(b == 0, torch.full_like(bits, 0x00400000), bits)
    bits = torch.where(b == 0xFF, torch.full_like(bits, 0x7FC00000), bits)
    return bits.view(torch.float32)


def dequantize_bytes(data: torch.Tensor, scale_bytes: torch.Tensor) -> torch.Tensor:
    """Token bytes ([N, 576], [N, >=7]) -> float32 [N, 512]."""
    nope = data[:, :L.NOPE_DIM].contiguous().view(torch.float8_e4m3fn).float()
    scale = ue8m0_to_float(scale_bytes[:, :L.NUM_TILES])
    nope = (nope.reshape(-1, L.NUM_TILES, L.TILE) * scale[..., None]).reshape(-1, L.NOPE_DIM)
    rope_values = data[:, L.NOPE_DIM:].contiguous().view(torch.bfloat16).float()
    return torch.cat([nope, rope_values], dim=1)


def dequantize(cache: torch.Tensor, slots: torch.Tensor,
               block_size: int = L.DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """float32 [N, 512]: NoPE = e4m3 x 2^(b-127) per 64 values, RoPE = bf16 -> float32.

    NaN codes and 0xFF scale bytes decode to NaN; nothing is replaced, so a corrupt cache stays
    visible downstream. A product that overflows float32 (scale byte near 254) is inf."""
    data, scale_bytes = token_bytes(cache, slots, block_size)
    return dequantize_bytes(data, scale_bytes)


def wrong_contiguous_reader(cache: torch.Tensor, slots: torch.Tensor,
                            block_size: int = L.DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """The first gfx936 reader, which was wrong: DO NOT USE. Kept so a test can show the oracle catches it.

    It makes the logical view contiguous (dropping the allocator's block stride) and reads each
    token as 584 consecutive bytes with its scales at bytes 576..583 (they live at the block end)."""
    logical = cache.view(torch.uint8)
    if logical.dim() == 2:
        logical = logical[:, :L.block_bytes(block_size)]
    raw = logical.contiguous().reshape(logical.shape[0], block_size, L.TOKEN_BYTES)
    slots = slots.to(torch.int64)
    token = raw[slots // block_size, slots % block_size]
    return dequantize_bytes(token[:, :L.TOKEN_DATA_BYTES], token[:, L.TOKEN_DATA_BYTES:])
