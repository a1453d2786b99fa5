"""vllm 5: the integer float32 -> e4m3 encode of the DSV4 Triton cache writers on gfx936, run with
TRITON_INTERPRET=1 on CPU. torch's x.to(torch.float8_e4m3fn) is the oracle for the encode; the
project's writer oracle (kernels.fp8_ds_mla.naive, checked against a numpy writer) for the cache
bytes."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton.language as tl
from triton.runtime import interpreter as ti

from _harness import check, report
from kernels.fp8_ds_mla import naive

# --- "no FP8 conversion" (gfx936 under DTK Triton): any cast to or from an fp8 type fails.
FP8_BLOCKED = {"on": False}
_orig_bitcast, _orig_fp2fp = ti.InterpreterBuilder.create_bitcast, ti.InterpreterBuilder.create_fp_to_fp


def _is_fp8(t):
    t = getattr(t, "scalar", t)
    return getattr(t, "is_fp8", lambda: False)()


def _blocked(orig):
    def call(self, src, dst_type, *rest):
        if FP8_BLOCKED["on"] and (_is_fp8(dst_type) or _is_fp8(src.dtype)):
            raise RuntimeError("FP8 conversion is not supported on this target (simulated gfx936)")
        return orig(self, src, dst_type, *rest)
    return call


ti.InterpreterBuilder.create_bitcast = _blocked(_orig_bitcast)
ti.InterpreterBuilder.create_fp_to_fp = _blocked(_orig_fp2fp)

import _fake_amdsmi  # noqa: E402
from vllm.models.deepseek_v4.common.ops import cache_utils  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402
from vllm.triton_utils import triton  # noqa: E402

SEED = int.from_bytes(os.urandom(4), "little")
print("seed", SEED)
gen = torch.Generator().manual_seed(SEED)

E4M3 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
FINITE = E4M3[~E4M3.isnan()].unique().sort().values  # -448 .. 448, one zero
MIDS = ((FINITE[1:].double() + FINITE[:-1].double()) / 2).float()  # exact in float32


def _edges(dtype):
    """Every e4m3 value, every midpoint between neighbours, the next `dtype` value either side of
    each midpoint, +-0, +-448 and values in (448, 464] (round to 448), as `dtype`."""
    mids = MIDS.to(dtype)
    up = torch.nextafter(mids, torch.full_like(mids, 1e30))
    down = torch.nextafter(mids, torch.full_like(mids, -1e30))
    over = torch.tensor([448.0, 449.0, 456.0, 463.0, 464.0]).to(dtype)
    x = torch.cat([FINITE.to(dtype), mids, up, down, over, -over, torch.tensor([0.0, -0.0], dtype=dtype)])
    assert torch.equal(mids.float(), MIDS), "midpoints are not exact in this dtype"
    return x


def _oracle(x: torch.Tensor) -> torch.Tensor:
    return x.float().to(torch.float8_e4m3fn).view(torch.uint8)


fp32_to_e4m3fn_manual = None  # imported by the check below (absent from the unpatched tree)


@triton.jit
def _encode(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, fp32_to_e4m3fn_manual(tl.load(x_ptr + offs, mask=mask)), mask=mask)


@check
def encode_matches_torch_bit_exact():
    global fp32_to_e4m3fn_manual
    from vllm.v1.attention.ops.common import fp32_to_e4m3fn_manual

    edges = _edges(torch.float32)
    tiny = torch.tensor([2.0**-10, 2.0**-10 * 1.0001, 3 * 2.0**-11, 2.0**-6 - 2.0**-10, 1e-30, 1e-45, 2.0**-149])
    rand = torch.randn(200_000, generator=gen) * torch.exp2(torch.randint(-16, 9, (200_000,), generator=gen).float())
    rand = rand.clamp(-464.0, 464.0)  # torch turns |x| > 464 into NaN; the writers clamp to 448
    x = torch.cat([edges, tiny, -tiny, rand])
    FP8_BLOCKED["on"] = True
    try:
        out = torch.empty(x.numel(), dtype=torch.uint8)
        _encode[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        nan = torch.tensor([float("nan"), -float("nan")])
        nan_out = torch.empty(2, dtype=torch.uint8)
        _encode[(1,)](nan, nan_out, 2, BLOCK=2)
    finally:
        FP8_BLOCKED["on"] = False
    want = _oracle(x)
    bad = (out != want).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} of {x.numel()} values differ from torch, first " + str(
        [(x[i].item(), hex(out[i]), hex(want[i])) for i in bad[:5]])
    assert nan_out.tolist() == [0x7F, 0xFF], f"NaN encodes as {[hex(b) for b in nan_out.tolist()]}"


def _write(kv: torch.Tensor, arch: str | None, blocked: bool):
    """quantize_and_insert_k_cache into a padded-stride cache on `arch` (None: the CPU platform)."""
    block_size, n = 16, kv.shape[0]
    stride = block_size * 584 + 192
    num_blocks = (n + block_size - 1) // block_size + 1
    store = torch.zeros(num_blocks * stride, dtype=torch.uint8)
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(7))[:n]
    orig_is_rocm = type(current_platform).is_rocm
    if arch is not None:
        _fake_amdsmi.set_arch(arch)
        type(current_platform).is_rocm = lambda self: True
    FP8_BLOCKED["on"] = blocked
    try:
        # the interpreter copies tensor arguments: hand it the whole storage (block stride kept)
        cache_utils.quantize_and_insert_k_cache(
            kv, store.as_strided((num_blocks, block_size, 584), (stride, 584, 1)), slots,
            block_size=block_size)
    finally:
        FP8_BLOCKED["on"] = False
        type(current_platform).is_rocm = orig_is_rocm
    return store, store.as_strided((num_blocks, block_size, 584), (stride, 584, 1)), slots


def _tokens():
    """Random tokens at random power-of-two magnitudes, then the bf16 edges planted in 64-value
    blocks whose max |x| is 448 (UE8M0 scale 1: the writer encodes the values themselves)."""
    edges = _edges(torch.bfloat16).float()
    edges = edges[edges.abs() <= 448]  # a larger value would raise the block's scale to 2
    per = 63
    n_edge = (edges.numel() + per - 1) // per
    n = n_edge + 40
    kv = torch.randn(n, 512, generator=gen) * torch.exp2(torch.randint(-8, 8, (n, 1), generator=gen).float())
    planted = torch.cat([edges, torch.zeros(n_edge * per - edges.numel())]).view(n_edge, per)
    kv[:n_edge, :448] = 0.0
    for t in range(n_edge):
        for b in range(7):  # the same edges in each of the 7 NoPE blocks, the last value 448
            kv[t, b * 64: b * 64 + per] = planted[t]
            kv[t, b * 64 + per] = -448.0 if b % 2 else 448.0
    return kv.bfloat16(), n_edge


@check
def writer_without_fp8_matches_oracle():
    """The K cache writer on gfx936 with FP8 casts failing writes the writer oracle's bytes (NoPE
    codes, UE8M0 scales, bf16 RoPE, pad), the planted edges included. (The interpreter's own
    float -> fp8 cast does not round to nearest even, so it is no reference on CPU; the in-tree test
    compares with the hardware cast on a GPU.)"""
    kv, n_edge = _tokens()
    store_m, cache_m, slots = _write(kv, "gfx936", blocked=True)
    want = torch.zeros_like(store_m)
    naive.encode(want.as_strided(cache_m.shape, cache_m.stride()), slots, kv.float(), block_size=16)
    assert torch.equal(store_m, want), f"{int((store_m != want).sum())} cache bytes differ from the oracle"
    # the planted values were encoded at scale 1: their NoPE bytes are torch's encode of the values
    raw = store_m.view(cache_m.shape[0], cache_m.stride(0))
    for t in range(n_edge):
        blk, pos = divmod(int(slots[t]), 16)
        got = raw[blk, pos * 576: pos * 576 + 448]
        assert torch.equal(got, _oracle(kv[t, :448])), f"token {t}: planted edges differ from torch"


@check
def writer_integer_encode_only_on_gfx936():
    """Which arch asks the writer for the integer encode (the kernel replaced by a recorder)."""
    launches = {}

    class _Recorder:
        def __getitem__(self, grid):
            return lambda *a, **kw: launches.__setitem__("kw", kw)

    saved = cache_utils.quantize_and_insert_k_kernel
    orig_is_rocm = type(current_platform).is_rocm
    got = {}
    try:
        cache_utils.quantize_and_insert_k_kernel = _Recorder()
        type(current_platform).is_rocm = lambda self: True
        for arch in ("gfx936", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):
            _fake_amdsmi.set_arch(arch)
            launches.clear()
            cache_utils.quantize_and_insert_k_cache(
                torch.zeros(2, 512, dtype=torch.bfloat16), torch.zeros(2, 16, 584, dtype=torch.uint8),
                torch.tensor([0, 1]), block_size=16)
            got[arch] = bool(launches["kw"].get("manual_e4m3", False))
    finally:
        cache_utils.quantize_and_insert_k_kernel = saved
        type(current_platform).is_rocm = orig_is_rocm
    want = {a: a == "gfx936" for a in got}
    assert got == want, f"integer e4m3 encode per arch: got {got}, want {want}"


report()
