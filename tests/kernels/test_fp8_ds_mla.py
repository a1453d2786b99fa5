"""fp8_ds_mla reference writer/reader against an independent numpy writer built on kernels.codecs.

Deterministic: every random cache and kv comes from a fixed seed; the byte edges (every e4m3 code,
NaN codes, scale bytes 0, 1, 127, 254, 255) are planted explicitly."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernels import codecs  # noqa: E402
from kernels.fp8_ds_mla import layout as L  # noqa: E402
from kernels.fp8_ds_mla import naive  # noqa: E402


def make_cache(num_blocks: int, block_size: int, pad_bytes: int, *, logical_3d: bool,
               fill: int | None = None, seed: int = 0):
    """Like vLLM's allocator: one flat buffer, blocks at a stride >= block_size*584, and a view.

    Returns (flat buffer, view handed to the reader)."""
    stride = L.block_bytes(block_size) + pad_bytes
    gen = torch.Generator().manual_seed(seed * 1_000_003 + num_blocks * 1009 + block_size * 31 + pad_bytes)
    flat = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=gen)
    if fill is not None:
        flat.fill_(fill)
    if logical_3d:
        view = flat.as_strided((num_blocks, block_size, L.TOKEN_BYTES), (stride, L.TOKEN_BYTES, 1))
    else:
        view = flat.view(num_blocks, stride)
    return flat, view


def numpy_writer(flat: np.ndarray, stride: int, block_size: int, slots: np.ndarray,
                 kv32: np.ndarray) -> None:
    """The writer's address formula and scale rule, from the format description, per token."""
    for slot, row in zip(slots.tolist(), kv32):
        if slot < 0:
            continue
        base = (slot // block_size) * stride
        pos = slot % block_size
        nope = row[:L.NOPE_DIM].reshape(L.NUM_TILES, L.TILE).astype(np.float32)
        amax = np.max(np.where(np.isnan(nope), np.float32(0), np.abs(nope)), axis=1)
        s = np.maximum(amax / np.float32(448.0), np.float32(2.0**-126))
        sbytes = codecs.ue8m0_encode(s.astype(np.float64), rounding="ceil")
        scale = codecs.ue8m0_decode(sbytes)
        codes = codecs.e4m3_encode(nope.astype(np.float64) / scale[:, None], saturate=True)
        rope = torch.from_numpy(row[L.NOPE_DIM:].copy()).to(torch.bfloat16).view(torch.uint8).numpy()
        d = base + pos * 576
        flat[d:d + 448] = codes.reshape(-1)
        flat[d + 448:d + 576] = rope
        sc = base + block_size * 576 + pos * 8
        flat[sc:sc + 7] = sbytes
        flat[sc + 7] = 0


def numpy_reader(flat: np.ndarray, stride: int, block_size: int, slots: np.ndarray) -> np.ndarray:
    out = np.empty((len(slots), L.KV_DIM), dtype=np.float64)
    for i, slot in enumerate(slots.tolist()):
        base = (slot // block_size) * stride
        pos = slot % block_size
        d = base + pos * 576
        sc = base + block_size * 576 + pos * 8
        scale = np.repeat(codecs.ue8m0_decode(flat[sc:sc + 7]), 64)
        out[i, :448] = codecs.e4m3_decode(flat[d:d + 448]) * scale
        out[i, 448:] = torch.from_numpy(flat[d + 448:d + 576].copy()).view(torch.bfloat16).double().numpy()
    with np.errstate(over="ignore"):  # scale byte 254 x 448 overflows float32, as on the device
        return out.astype(np.float32)  # one rounding of the exact product: what float32 math gives


def random_kv(n: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed + n)
    # per-tile magnitudes over many binades so scale bytes differ tile to tile
    mag = np.exp2(rng.uniform(-20, 20, size=(n, 8, 1)))
    kv = rng.standard_normal((n, 8, 64)) * mag
    return torch.from_numpy(kv.reshape(n, 512).astype(np.float32)).to(dtype)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.float(), b.float()
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return bool(torch.equal(nan_a, nan_b)
                and torch.equal(a[~nan_a].view(torch.int32), b[~nan_b].view(torch.int32)))


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("pad_bytes", [0, 4096 + 8])
@pytest.mark.parametrize("logical_3d", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_encode_matches_numpy_writer_byte_for_byte(block_size, pad_bytes, logical_3d, dtype):
    num_blocks = 5
    flat, view = make_cache(num_blocks, block_size, pad_bytes, logical_3d=logical_3d)
    flat_np = flat.numpy().copy()
    rng = np.random.default_rng(block_size + pad_bytes + int(logical_3d))
    n = 2 * block_size
    # always include both ends of a block and of the cache; slots are distinct, as in vLLM
    ends = [0, block_size - 1, block_size, num_blocks * block_size - 1]
    others = np.setdiff1d(np.arange(num_blocks * block_size), ends)
    slots = np.concatenate([ends, [-1], rng.choice(others, size=n - 5, replace=False)])
    rng.shuffle(slots)  # -1 is a padding token: writes nothing
    slots = np.concatenate([slots[slots >= 0], [-1]])  # the planted rows below are real tokens
    kv = random_kv(n, dtype)
    # planted: an all-zero tile (floor scale), a tile at exactly 448 * 2^k with every e4m3 subnormal
    # code after scaling, a tile whose amax / 448 is a power of two plus one float32 ulp, NaN
    units = np.concatenate([[448.0], np.arange(1, 8) * 2.0**-9, -np.arange(1, 8) * 2.0**-9, [2.0**-10]])
    kv[0, :64] = 0
    kv[0, 64:64 + units.size] = torch.from_numpy(units * 2.0**-20).to(dtype)
    kv[1, :64] = torch.from_numpy(np.linspace(-1, 1, 64) * 448 * 2.0**5).to(dtype)
    kv[1, 64] = float(np.nextafter(np.float32(448.0), np.float32(np.inf)))
    kv[2, 7] = float("nan")
    naive.encode(view, torch.from_numpy(slots), kv, block_size)
    stride = L.block_bytes(block_size) + pad_bytes
    numpy_writer(flat_np, stride, block_size, slots, kv.float().numpy())
    diff = np.flatnonzero(flat.numpy() != flat_np)
    assert diff.size == 0, f"{diff.size} bytes differ, first at {diff[:5]}"


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("pad_bytes", [0, 1000])
def test_dequantize_matches_numpy_reader_on_arbitrary_bytes(block_size, pad_bytes):
    # Random bytes everywhere: every e4m3 code (NaNs included), every scale byte (0xFF, 254, 0).
    num_blocks = 4
    flat, view = make_cache(num_blocks, block_size, pad_bytes, logical_3d=True)
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(block_size))
    # planted in slot 0's bytes: every e4m3 code once per scale byte 0, 1, 127, 254, 255 ...
    raw = naive.block_view(view, block_size)
    raw[0, :256] = torch.arange(256, dtype=torch.uint8)
    raw[0, 256:448] = torch.arange(192, dtype=torch.uint8)
    raw[0, block_size * 576:block_size * 576 + 8] = torch.tensor([0, 1, 127, 254, 255, 0, 118, 7], dtype=torch.uint8)
    got = naive.dequantize(view, slots, block_size)
    ref = numpy_reader(flat.numpy(), L.block_bytes(block_size) + pad_bytes, block_size,
                       slots.numpy())
    assert bits_equal(got, torch.from_numpy(ref))


@pytest.mark.parametrize("block_size", [16, 64])
def test_round_trip_error_is_within_half_an_e4m3_step(block_size):
    num_blocks = 3
    _, view = make_cache(num_blocks, block_size, 584, logical_3d=False)
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(7))[: 2 * block_size]
    kv = random_kv(len(slots), torch.bfloat16).float()
    naive.encode(view, slots, kv, block_size)
    out = naive.dequantize(view, slots, block_size)
    assert torch.equal(out[:, 448:], kv[:, 448:])  # bf16 input RoPE is stored exactly
    nope, ref = out[:, :448].reshape(-1, 7, 64), kv[:, :448].reshape(-1, 7, 64)
    amax = ref.abs().amax(-1, keepdim=True)
    # scale >= amax/448, < 2*amax/448; e4m3 relative step 2^-3, so error <= half a step of the
    # largest binade: amax/448*2 * 448 * 2^-4 = amax/8; normal values are far tighter
    assert torch.all((nope - ref).abs() <= amax / 8)
    big = ref.abs() > amax / 4
    assert torch.all((nope - ref).abs()[big] <= ref.abs()[big] * 2.0**-4)


def test_scale_bytes_follow_the_ceil_power_of_two_rule():
    _, view = make_cache(1, 16, 0, logical_3d=True, fill=0xAA)
    kv = torch.zeros(4, 512)
    kv[0, :64] = 448.0  # amax/448 = 1 exactly -> scale 2^0 -> byte 127, code 448 = 0x7E
    kv[1, :64] = 448.5  # just above a power of two -> 2^1 -> byte 128
    kv[2, 64:128] = 1e-30  # 1e-30/448 ~ 2^-108.5 -> 2^-108 -> byte 19
    kv[2, 128:192] = 1e-38  # 1e-38/448 is below FLT_MIN: s floors at 2^-126 -> byte 1
    kv[3, :64] = -3e38  # huge, negative: 3e38/448 ~ 2^119.2 -> 2^120 -> byte 247
    slots = torch.tensor([0, 1, 2, 15])
    naive.encode(view, slots, kv, 16)
    sb = naive.scales(view, slots, 16)
    assert sb[0].tolist() == [127, 1, 1, 1, 1, 1, 1]  # all-zero tiles get the floor scale
    assert sb[1, 0] == 128 and sb[2, 1] == 19 and sb[2, 2] == 1 and sb[3, 0] == 247
    assert naive.nope_codes(view, slots, 16)[0, 0] == 0x7E
    # pad byte is 0 and the bytes after the last scale row are untouched
    raw = view.reshape(-1)
    assert raw[16 * 576 + 15 * 8 + 7] == 0
    assert raw[16 * 576 + 3 * 8] == 0xAA  # slot 3 never written


def test_nan_nope_is_stored_as_nan_and_ignored_by_amax():
    _, view = make_cache(1, 16, 0, logical_3d=True)
    kv = random_kv(1)
    kv[0, 3] = float("nan")
    kv[0, 4] = -float("nan")
    naive.encode(view, torch.tensor([7]), kv, 16)
    codes = naive.nope_codes(view, torch.tensor([7]), 16)[0]
    assert int(codes[3]) == 0x7F and int(codes[4]) == 0xFF
    out = naive.dequantize(view, torch.tensor([7]), 16)[0]
    assert torch.isnan(out[3]) and torch.isnan(out[4])
    assert torch.isfinite(out[:3]).all() and torch.isfinite(out[5:]).all()


def test_infinite_nope_is_refused_but_rope_passes_through():
    _, view = make_cache(1, 16, 0, logical_3d=True)
    kv = random_kv(1)
    kv[0, 500] = float("inf")
    naive.encode(view, torch.tensor([2]), kv, 16)
    assert torch.isinf(naive.dequantize(view, torch.tensor([2]), 16)[0, 500])
    kv[0, 10] = -float("inf")
    with pytest.raises(ValueError):
        naive.encode(view, torch.tensor([2]), kv, 16)


def test_extreme_scale_bytes_decode():
    _, view = make_cache(1, 16, 0, logical_3d=True)
    slots = torch.tensor([5])
    data, _ = naive.token_bytes(view, slots, 16)
    raw = view.reshape(-1)
    raw[5 * 576:5 * 576 + 448] = 0x7E  # every NoPE code 448
    raw[16 * 576 + 5 * 8:16 * 576 + 5 * 8 + 7] = torch.tensor([0, 1, 127, 254, 255, 118, 119])
    out = naive.dequantize(view, slots, 16)[0, :448].reshape(7, 64)[:, 0]
    assert out[0] == 448 * 2.0**-127  # subnormal-scale product, float32 normal
    assert out[1] == 448 * 2.0**-126
    assert out[2] == 448.0
    assert torch.isinf(out[3])  # 448 * 2^127 overflows float32
    assert torch.isnan(out[4])  # 0xFF is the UE8M0 NaN
    assert out[5] == 448 * 2.0**-9 and out[6] == 448 * 2.0**-8  # J17's scale bytes


def test_block_view_refuses_layouts_it_cannot_address():
    flat = torch.zeros(4 * 16 * 584, dtype=torch.uint8)
    with pytest.raises(ValueError, match="a block holds"):  # too few bytes per block for 64
        naive.block_view(flat.view(4, 16 * 584), 64)
    with pytest.raises(ValueError, match="a block holds"):  # the same with a single block
        naive.block_view(flat.view(1, 4 * 16 * 584)[:, :16 * 584], 64)
    strided = flat.view(4, 16, 584)[:, :, ::2]
    with pytest.raises(ValueError, match="not dense"):
        naive.block_view(strided, 16)
    wide = flat.view(2, 2 * 16 * 584)[:, ::2]  # enough bytes, but every other one
    with pytest.raises(ValueError, match="not dense"):
        naive.block_view(wide, 16)
    for nb in (2, 3):  # blocks that overlap (stride below the block's bytes)
        with pytest.raises(ValueError, match="block stride"):
            naive.block_view(flat.as_strided((nb, 16, 584), (1000, 584, 1)), 16)
    with pytest.raises(ValueError, match="block dimension"):
        naive.block_view(flat, 16)
    for slots in ([0, 64], [-1, 3], [63, 64, 0]):
        with pytest.raises(ValueError, match="slot outside"):
            naive.dequantize(flat.view(4, 16 * 584), torch.tensor(slots), 16)
    kv = torch.zeros(2, 512)
    with pytest.raises(ValueError, match="slot outside"):
        naive.encode(flat.view(4, 16 * 584), torch.tensor([3, 64]), kv, 16)
    for bad in (torch.zeros(2, 511), torch.zeros(2, 512, 1)):
        with pytest.raises(ValueError, match="kv must be"):
            naive.encode(flat.view(4, 16 * 584), torch.tensor([0, 1]), bad, 16)
    assert not flat.any()  # nothing was written


def test_block_view_accepts_what_it_can_address():
    """Size-1 dims with any stride, a single block with any stride, and caches typed as another
    dtype (read as their bytes) all give the same bytes as the plain uint8 view."""
    flat, view = make_cache(2, 16, 0, logical_3d=True, seed=9)
    slots = torch.tensor([0, 17, 31])
    want = naive.dequantize(view, slots, 16)
    odd_unit = flat.as_strided((2, 1, 16 * 584), (16 * 584, 7, 1))
    assert bits_equal(naive.dequantize(odd_unit, slots, 16), want)
    one = flat[:16 * 584].as_strided((1, 16, 584), (1, 584, 1))
    assert bits_equal(naive.dequantize(one, torch.tensor([0, 15]), 16),
                      naive.dequantize(view, torch.tensor([0, 15]), 16))
    as_int8 = view.view(torch.int8)
    assert bits_equal(naive.dequantize(as_int8, slots, 16), want)
    as_bf16 = flat.view(torch.bfloat16).view(2, 16 * 584 // 2)
    assert bits_equal(naive.dequantize(as_bf16, slots, 16), want)


def test_rope_reader_returns_the_stored_bf16():
    _, view = make_cache(2, 16, 8, logical_3d=True, seed=4)
    slots = torch.tensor([3, 30])
    kv = random_kv(2, torch.bfloat16, seed=4)
    naive.encode(view, slots, kv, 16)
    got = naive.rope(view, slots, 16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, kv[:, 448:])


def test_block_view_keeps_the_allocator_stride_without_copying():
    flat, view = make_cache(3, 16, 333, logical_3d=True)
    raw = naive.block_view(view, 16)
    assert raw.data_ptr() == flat.data_ptr() and raw.stride() == (16 * 584 + 333, 1)


def test_wrong_contiguous_reader_is_caught():
    block_size = 64
    flat, view = make_cache(3, block_size, 7 * 584, logical_3d=True)
    slots = torch.randperm(3 * block_size, generator=torch.Generator().manual_seed(3))
    kv = random_kv(len(slots), torch.bfloat16)
    naive.encode(view, slots, kv, block_size)
    right = naive.dequantize(view, slots, block_size)
    wrong = naive.wrong_contiguous_reader(view, slots, block_size)
    ref = numpy_reader(flat.numpy(), L.block_bytes(block_size) + 7 * 584, block_size, slots.numpy())
    assert bits_equal(right, torch.from_numpy(ref))
    assert not bits_equal(wrong, torch.from_numpy(ref))
    # and it is not a near miss: most tokens are wrong
    close = torch.isclose(wrong, right, rtol=0.1, atol=0).all(dim=1)
    assert close.float().mean() < 0.1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_writer_and_reader_match_cpu():
    block_size, nb, pad = 64, 6, 512
    flat, view = make_cache(nb, block_size, pad, logical_3d=True)
    slots = torch.randperm(nb * block_size, generator=torch.Generator().manual_seed(5))[:200]
    kv = random_kv(200, torch.bfloat16)
    kv[3, 7] = float("nan")
    flat_gpu = flat.cuda()
    stride = L.block_bytes(block_size) + pad
    view_gpu = flat_gpu.as_strided((nb, block_size, L.TOKEN_BYTES), (stride, L.TOKEN_BYTES, 1))
    naive.encode(view, slots, kv, block_size)
    naive.encode(view_gpu, slots.cuda(), kv.cuda(), block_size)
    assert torch.equal(flat_gpu.cpu(), flat)
    assert bits_equal(naive.dequantize(view_gpu, slots.cuda(), block_size).cpu(),
                      naive.dequantize(view, slots, block_size))


def test_layout_offsets_are_where_the_writer_puts_each_token():
    """layout.data_offset / scale_offset against bytes the writer stored, at the default block size
    (64, what vLLM allocates for this cache) and at 16, for the first, a middle and the last slot."""
    for block_size in (L.DEFAULT_BLOCK_SIZE, 16):
        flat, view = make_cache(2, block_size, 40, logical_3d=True, fill=0, seed=11)
        slots = torch.tensor([0, block_size // 2 + 1, block_size - 1, 2 * block_size - 1])
        kv = random_kv(len(slots), seed=11)
        if block_size == L.DEFAULT_BLOCK_SIZE:
            naive.encode(view, slots, kv)  # block_size left to its default
        else:
            naive.encode(view, slots, kv, block_size)
        codes, sb = naive.quantize_nope(kv[:, :L.NOPE_DIM])
        stride = L.block_bytes(block_size) + 40
        for i, slot in enumerate(slots.tolist()):
            base = (slot // block_size) * stride
            d = base + L.data_offset(block_size, slot % block_size)
            sc = base + L.scale_offset(block_size, slot % block_size)
            assert torch.equal(flat[d:d + L.NOPE_DIM], codes[i])
            assert torch.equal(flat[sc:sc + L.NUM_TILES], sb[i]) and flat[sc + 7] == 0
    assert L.block_bytes(16) == 16 * 584 and L.TOKEN_BYTES == 584 and L.DEFAULT_BLOCK_SIZE == 64
