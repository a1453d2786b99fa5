"""In-place FP8 (e4m3) quantize-dequantize of the DeepSeek-V4 attention output.

DeepSeek-V4.1-Flash-1017's reference rounds the attention output ``o`` to FP8
and back before the ``wo_a`` einsum (``act_quant(o, 32, "ue8m0", ...,
inplace=True)``). Per block of ``block`` values along each group's row:

    amax = max(max(|x|) in fp32, 1e-4)
    s    = 2 ** ceil_log2(amax * fp8_max_inv)   # fp8_max_inv = float32(1 / 448),
                                                # ceil_log2 read from the fp32 bits
    o    = bf16(e4m3_rne(clamp(x / s, -448, 448)) * s)

A block holding NaN or +-inf becomes NaN, all of it, as in the reference's
fp32 arithmetic (amax is NaN or inf, so is s, and every x / s * s is NaN:
0 * inf, inf / inf or NaN); it is written as the canonical bf16 NaN 0x7FC0,
so that every path gives the same bits. The other blocks are not affected.

On NVIDIA GPUs the hardware e4m3 conversion is used on sm89 and newer; on
older ones (or when ``emulate`` is set) the same rounding is done in fp32:
round half to even onto the e4m3 grid, signed zero kept. Other devices (CPU,
ROCm, NPU, ...) are refused: this has not been run there. Only torch and triton
are imported here.
"""

import functools

import torch
import triton
import triton.language as tl

FP8_E4M3_MAX = tl.constexpr(448.0)
# float32(1 / 448) and float32(1e-4), as bits, so every path uses the same values.
_FP8_MAX_INV_BITS = tl.constexpr(0x3B124925)
_AMAX_FLOOR_BITS = tl.constexpr(0x38D1B717)
# |x| as fp32 bits at or above this (inf, NaN) makes its block NaN.
_INF_BITS = tl.constexpr(0x7F800000)
# What a block holding NaN or +-inf is written as (bf16 bits).
_BF16_NAN_BITS = tl.constexpr(0x7FC0)


@triton.jit
def _e4m3_rne_fp32(y):
    # y: fp32, |y| <= 448. Round half to even onto the e4m3 grid in fp32:
    # quantum 2^(e - 3) for normals (e >= -6), 2^-9 for subnormals.
    bits = y.to(tl.uint32, bitcast=True)
    sign = bits & 0x80000000
    mag_bits = bits & 0x7FFFFFFF
    e = (mag_bits >> 23).to(tl.int32) - 127
    e = tl.maximum(e, -6)
    quantum = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)
    inv_quantum = ((127 - (e - 3)) << 23).to(tl.float32, bitcast=True)
    a = mag_bits.to(tl.float32, bitcast=True) * inv_quantum  # exact, in [0, 16)
    f = tl.floor(a)
    frac = a - f
    odd = (f.to(tl.int32) & 1) == 1
    up = (frac > 0.5) | ((frac == 0.5) & odd)
    k = tl.where(up, f + 1.0, f)
    r = (k * quantum).to(tl.uint32, bitcast=True)
    return (r | sign).to(tl.float32, bitcast=True)


@triton.jit
def _o_fp8_qdq_kernel(
    o_ptr,
    G,
    D,
    stride_t,
    stride_g,
    BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    HW_FP8: tl.constexpr,
):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    t = row // G
    g = row - t * G
    base = t.to(tl.int64) * stride_t + g.to(tl.int64) * stride_g
    NB: tl.constexpr = CHUNK // BLOCK
    cols = (
        chunk * CHUNK + tl.arange(0, NB)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    )
    mask = cols < D
    ptrs = o_ptr + base + cols
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)

    # amax on the bits of |x|: for non-negative floats the integer order is
    # the float order, +inf above every finite value and NaN above +inf, so
    # a block holding NaN or +-inf is seen (a float max may drop a NaN).
    amax_bits = tl.max(x.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=1)
    amax_bits = tl.maximum(amax_bits, _AMAX_FLOOR_BITS)
    non_finite = amax_bits >= _INF_BITS
    amax = amax_bits.to(tl.float32, bitcast=True)
    r = amax * tl.full([NB], _FP8_MAX_INV_BITS, tl.uint32).to(tl.float32, bitcast=True)
    rb = r.to(tl.uint32, bitcast=True)
    e = ((rb >> 23) & 0xFF).to(tl.int32) - 127 + ((rb & 0x7FFFFF) != 0).to(tl.int32)
    s = ((e + 127) << 23).to(tl.float32, bitcast=True)
    inv_s = ((127 - e) << 23).to(tl.float32, bitcast=True)

    y = x * inv_s[:, None]  # x / s, exact: s is a power of two
    y = tl.minimum(tl.maximum(y, -FP8_E4M3_MAX), FP8_E4M3_MAX)
    if HW_FP8:
        q = y.to(tl.float8e4nv).to(tl.float32)
    else:
        q = _e4m3_rne_fp32(y)
    out = (q * s[:, None]).to(tl.bfloat16).to(tl.int16, bitcast=True)
    nan = tl.full([NB, BLOCK], _BF16_NAN_BITS, tl.int16)
    out = tl.where(non_finite[:, None], nan, out)
    tl.store(ptrs, out.to(tl.bfloat16, bitcast=True), mask=mask)


@functools.lru_cache(maxsize=None)
def _hw_fp8_supported(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 9)


def _pick_chunk(rows: int, D: int, block: int) -> int:
    # Large T: 4096 values a program (measured best on an H200); small T: more,
    # smaller programs so a few rows still spread over the SMs.
    chunk = min(triton.next_power_of_2(D), 4096 if rows >= 2048 else 1024)
    return max(chunk, triton.next_power_of_2(block))


def check_o_fp8_qdq_block(block: int, D: int) -> None:
    """Raise ValueError unless ``block`` is a power of two dividing the group
    row width ``D``: the one check of the SGLANG_DSV4_O_FP8_QDQ_BLOCK value
    (0, off, is the caller's business). Checked here rather than left to
    Triton: a block that is not a power of two passes D % block and then fails
    in tl.arange."""
    if (
        isinstance(block, bool)
        or not isinstance(block, int)
        or block <= 0
        or block & (block - 1)
    ):
        raise ValueError(
            f"SGLANG_DSV4_O_FP8_QDQ_BLOCK={block!r} is not a power of two; set 0 "
            "(off) or a power of two (DeepSeek-V4.1-Flash-1017 uses 32)"
        )
    if D % block:
        raise ValueError(
            f"SGLANG_DSV4_O_FP8_QDQ_BLOCK={block} does not divide the group row "
            f"width D={D}; set 0 (off) or a power of two dividing {D}"
        )


def _check_args(o: torch.Tensor, block: int) -> None:
    if o.dim() != 3:
        raise ValueError(f"o must be [T, G, D], got shape {tuple(o.shape)}")
    check_o_fp8_qdq_block(block, o.shape[2])
    if o.dtype != torch.bfloat16:
        raise ValueError(f"o must be bfloat16 (the wo_a input), got {o.dtype}")
    if o.numel() and o.stride(2) != 1:
        raise ValueError(f"o's last dim must be contiguous, got strides {o.stride()}")


# Read once: a ROCm build of torch reports its GPU tensors as CUDA tensors.
_IS_HIP = torch.version.hip is not None
# (block, D, rows >= 2048, device index, emulate) -> (CHUNK, programs a row,
# HW_FP8). A key is added only after its block, D and device passed the
# checks, so a CUDA call with a key seen before needs no more than the O(1)
# checks of o_fp8_qdq_'s first branch before the launch.
_LAUNCH_CONFIGS = {}


def o_fp8_qdq_(o: torch.Tensor, block: int = 32, emulate: bool = False) -> torch.Tensor:
    """Round ``o`` [T, G, D] (bf16, last dim contiguous) to FP8 e4m3
    in blocks of ``block`` values along D, and back, in place. Returns ``o``.

    ``emulate`` forces the fp32 emulation of the e4m3 rounding instead of the
    hardware conversion (which is used on CUDA sm89+ only). ``block`` must be a
    power of two dividing D. Raises ValueError on bad arguments and
    NotImplementedError on devices other than NVIDIA CUDA GPUs.
    """
    shape = o.shape
    if (
        len(shape) == 3
        and o.is_cuda
        and o.dtype == torch.bfloat16
        and type(block) is int
        and not _IS_HIP
    ):
        T, G, D = shape
        rows = T * G
        stride_t, stride_g, stride_d = o.stride()
        cfg = _LAUNCH_CONFIGS.get((block, D, rows >= 2048, o.get_device(), emulate))
        if cfg is not None and stride_d == 1 and rows:
            chunk, n_chunks, hw = cfg
            _o_fp8_qdq_kernel[(rows, n_chunks)](
                o,
                G,
                D,
                stride_t,
                stride_g,
                BLOCK=block,
                CHUNK=chunk,
                HW_FP8=hw,
                num_warps=4,
            )
            return o
    return _o_fp8_qdq_checked_(o, block, emulate)


def _o_fp8_qdq_checked_(o: torch.Tensor, block: int, emulate: bool) -> torch.Tensor:
    # o_fp8_qdq_ on a call its first branch does not take: the full checks,
    # then the launch configuration is kept for the next call.
    _check_args(o, block)
    if _IS_HIP or not o.is_cuda:
        raise NotImplementedError(
            "o FP8 QDQ has been verified on NVIDIA CUDA GPUs only, not on "
            f"{'ROCm' if _IS_HIP else o.device.type}; "
            "unset SGLANG_DSV4_O_FP8_QDQ_BLOCK"
        )
    if o.numel() == 0:
        return o
    T, G, D = o.shape
    device = o.get_device()
    hw = (not emulate) and _hw_fp8_supported(device)
    chunk = _pick_chunk(T * G, D, block)
    key = (block, D, T * G >= 2048, device, emulate)
    _LAUNCH_CONFIGS[key] = (chunk, triton.cdiv(D, chunk), hw)
    _o_fp8_qdq_kernel[(T * G, triton.cdiv(D, chunk))](
        o,
        G,
        D,
        o.stride(0),
        o.stride(1),
        BLOCK=block,
        CHUNK=chunk,
        HW_FP8=hw,
        num_warps=4,
    )
    return o
