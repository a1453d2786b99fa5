"""NVFP4 oracles in float64 numpy, built on kernels/codecs.py.

value = e2m1 * block_scale (UE4M3, one per 16 values along K) * global_scale (FP32, per tensor)

Also reference forms of the pieces an NVFP4 GEMM on SM100 needs: four UE4M3 scales packed per int32
(byte i of word w is block 4w+i), the global-scale fold (UE4M3 * FP32 -> UE4M3, one rounding; kept to show
why the global scale belongs in an FP32 epilogue multiply instead), and the scale_vec::4X TMEM
coordinates of a scale factor. Written from the format and PTX-ISA definitions, not from
DeepGEMM's code. Hard rule (experts stay NVFP4): nothing here converts UE4M3 to UE8M0 or merges 16-blocks into 32.
"""

from __future__ import annotations

import numpy as np

from ..codecs import e2m1_decode, e2m1_encode, e2m1_pack, e2m1_unpack, ue4m3_decode, ue4m3_encode

BLOCK = 16
UE4M3_MAX = 448.0
E2M1_MAX = 6.0


def unpack_e2m1(packed: np.ndarray) -> np.ndarray:
    """[..., k] uint8 (two values a byte, low nibble first) -> [..., 2k] float64."""
    return e2m1_decode(e2m1_unpack(np.asarray(packed, dtype=np.uint8)))


def pack_e2m1(values) -> np.ndarray:
    """[..., 2k] floats already on the E2M1 grid (or to be rounded onto it) -> [..., k] uint8."""
    return e2m1_pack(e2m1_encode(values))


def dequantize(packed: np.ndarray, block_scale: np.ndarray, global_scale: float) -> np.ndarray:
    """packed [..., K/2] uint8, block_scale [..., ceil(K/16)] uint8 UE4M3 codes -> [..., K] float64."""
    vals = unpack_e2m1(packed)
    k = vals.shape[-1]
    scales = ue4m3_decode(np.asarray(block_scale, dtype=np.uint8))
    if scales.shape[-1] != -(-k // BLOCK):
        raise ValueError(f"need {-(-k // BLOCK)} block scales for K={k}, got {scales.shape[-1]}")
    per_value = np.repeat(scales, BLOCK, axis=-1)[..., :k]
    return vals * per_value * np.float64(np.float32(global_scale))


def quantize(x: np.ndarray, global_scale: float | None = None):
    """float [..., K] (K even) -> (packed uint8 [..., K/2], UE4M3 codes [..., ceil(K/16)], global_scale).

    ModelOpt-style recipe in float64: global_scale = amax / (448 * 6) (float32), block scale =
    UE4M3(block_amax / 6 / global_scale), values = E2M1(x / (block_scale * global_scale)), RNE everywhere.
    A zero block gets scale 0 and codes 0. NaN inputs raise (E2M1 has no NaN)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(x)):
        raise ValueError("quantize: NaN input")
    k = x.shape[-1]
    if k % 2:
        raise ValueError("quantize: K must be even (two values a byte)")
    nb = -(-k // BLOCK)
    xp = np.zeros(x.shape[:-1] + (nb * BLOCK,))
    xp[..., :k] = x
    blocks = xp.reshape(x.shape[:-1] + (nb, BLOCK))
    if global_scale is None:
        amax = float(np.max(np.abs(x))) if x.size else 0.0
        global_scale = float(np.float32(amax / (UE4M3_MAX * E2M1_MAX))) if amax > 0 else 1.0
    g = np.float64(np.float32(global_scale))
    if not np.isfinite(g) or g <= 0:
        raise ValueError("quantize: global scale must be finite and positive")
    bamax = np.max(np.abs(blocks), axis=-1)
    sf_codes = ue4m3_encode(np.minimum(bamax / E2M1_MAX / g, UE4M3_MAX))
    sf = ue4m3_decode(sf_codes)
    denom = sf[..., None] * g
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(denom > 0, blocks / np.where(denom > 0, denom, 1.0), 0.0)
    codes = e2m1_encode(q).reshape(x.shape[:-1] + (nb * BLOCK,))[..., :k]
    return e2m1_pack(codes), sf_codes, float(g)


def fold_global_scale(sf_codes: np.ndarray, global_scale: float) -> np.ndarray:
    """UE4M3 codes * FP32 global scale -> UE4M3 codes, exact product rounded once (RNE).
    Products above 448 raise (no silent saturation); below 2^-10 they round to 0."""
    g = np.float64(np.float32(global_scale))
    if not np.isfinite(g) or g < 0:
        raise ValueError("fold_global_scale: global scale must be finite and non-negative")
    prod = ue4m3_decode(np.asarray(sf_codes, dtype=np.uint8)) * g
    if np.any(np.isnan(prod)):
        raise ValueError("fold_global_scale: NaN block scale")
    if np.any(prod > UE4M3_MAX):
        raise ValueError("fold_global_scale: folded scale above 448")
    return ue4m3_encode(prod)


def pack_sf_int32(sf_codes: np.ndarray) -> np.ndarray:
    """[..., nb] UE4M3 codes -> [..., ceil(nb/4)] int32; byte i (from the least significant) of word w is
    block 4w+i; a partial last word is padded with zero scales."""
    c = np.asarray(sf_codes, dtype=np.uint8)
    ue4m3_decode(c)  # validates: no sign bit
    nw = -(-c.shape[-1] // 4)
    padded = np.zeros(c.shape[:-1] + (nw * 4,), dtype=np.int64)
    padded[..., : c.shape[-1]] = c
    w = padded.reshape(c.shape[:-1] + (nw, 4))
    packed = w[..., 0] + (w[..., 1] << 8) + (w[..., 2] << 16) + (w[..., 3] << 24)
    return packed.astype(np.uint32).view(np.int32)


def unpack_sf_int32(packed: np.ndarray, nb: int) -> np.ndarray:
    p = np.asarray(packed, dtype=np.int32).view(np.uint32).astype(np.int64)
    out = np.stack([(p >> s) & 0xFF for s in (0, 8, 16, 24)], axis=-1).reshape(p.shape[:-1] + (p.shape[-1] * 4,))
    return out[..., :nb].astype(np.uint8)


def tmem_4x_coords(row: int, k_block: int, sf_block_mn: int) -> tuple[int, int, int]:
    """(lane, column, byte) of scale (row, k_block) of an sf_block_mn x block_k tile under scale_vec::4X.

    One MMA covers K = 64 = four 16-blocks, and reads all four scales of a row from one 32-bit TMEM cell
    (SF ID 0), so MMA m = k_block // 4 owns its own sf_block_mn / 32 columns. Rows come in 128-row groups
    copied by UTCCP 4x32dp128bit: row r of group g is in lane r % 32 (repeated in the four 32-lane
    sub-partitions), column 4g + r // 32 of that MMA's columns. Our reading of the PTX ISA (tcgen05 block
    scaling, scale_vec::4X), not checked on hardware."""
    if not (0 <= row < sf_block_mn and sf_block_mn % 128 == 0 and k_block >= 0):
        raise ValueError("tmem_4x_coords: bad coordinates")
    g, r = divmod(row, 128)
    return r % 32, (k_block // 4) * (sf_block_mn // 32) + 4 * g + r // 32, k_block % 4


def tmem_1x_num_cols(sf_block_mn: int) -> int:
    """Columns the 1X (kind::mxf8f6f4, UE8M0, block 32) scales of one 128-value K block take: the four MMAs
    share them and pick their byte with the SF ID. Here for contrast with the 4X layout only."""
    return sf_block_mn // 32


def tmem_4x_num_cols(sf_block_mn: int, block_k: int) -> int:
    if sf_block_mn % 128 or block_k % 64:
        raise ValueError("tmem_4x_num_cols: sf_block_mn % 128 and block_k % 64 must be 0")
    return sf_block_mn // 32 * (block_k // 64)
