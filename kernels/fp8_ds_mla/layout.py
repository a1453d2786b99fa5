"""Byte layout of vLLM's fp8_ds_mla KV cache for DeepSeek V4 (584 logical bytes per token).

The cache is declared as [num_blocks, block_size, 584] uint8, but the writer does not store 584
contiguous bytes per token. Each block is packed as

    [block_size x 576 bytes token data][block_size x 8 bytes scales]

    token data at  block_base + pos * 576:  448 bytes e4m3 NoPE, then 128 bytes bf16 RoPE (64 values)
    scales at      block_base + block_size * 576 + pos * 8:  7 UE8M0 bytes (one per 64 NoPE values)
                   and 1 pad byte

and block_base = block_index * block_stride, where the stride comes from the allocator and can be
larger than block_size * 584 (the gfx936 bring-up saw 1,002,240 bytes). Readers must keep that stride:
`.contiguous()` on the logical view drops it, and `token[576:584]` reads the wrong bytes.
"""

from __future__ import annotations

NOPE_DIM = 448
ROPE_DIM = 64
KV_DIM = NOPE_DIM + ROPE_DIM  # 512 values per token
TILE = 64  # NoPE values per UE8M0 scale
NUM_TILES = NOPE_DIM // TILE  # 7
TOKEN_DATA_BYTES = NOPE_DIM + 2 * ROPE_DIM  # 576
SCALE_BYTES = 8  # 7 scales + 1 pad
TOKEN_BYTES = TOKEN_DATA_BYTES + SCALE_BYTES  # 584
DEFAULT_BLOCK_SIZE = 64


def data_offset(block_size: int, pos: int) -> int:
    """Byte offset of a token's 576 data bytes from its block's base."""
    del block_size  # data does not depend on it; kept so both offsets read alike
    return pos * TOKEN_DATA_BYTES


def scale_offset(block_size: int, pos: int) -> int:
    """Byte offset of a token's 8 scale bytes from its block's base."""
    return block_size * TOKEN_DATA_BYTES + pos * SCALE_BYTES


def block_bytes(block_size: int) -> int:
    """Bytes the layout uses in one block; the allocator's stride is at least this."""
    return block_size * TOKEN_BYTES
