"""vllm 5: the integer float32 -> e4m3 encode of the DSV4 Triton cache writers on gfx936, run with
TRITON_INTERPRET=1 on CPU. torch's x.to(torch.float8_e4m3fn) is the oracle for the encode; the
project's writer oracle (kernels.fp8_ds_mla.naive, checked against a numpy writer) for the cache
bytes."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter as ti

from _harness import check, report
from dsv4_kernels.fp8_ds_mla import naive

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


def _torch_fp2fp(self, src, dst_type, rounding_mode):
    """The interpreter's float32 -> e4m3 cast does not round to nearest even; make it torch's
    conversion, saturated at +-448 (as the GPU's satfinite cvt), so that a writer run with the cast
    is the oracle for the same writer run with the integer encode."""
    if getattr(dst_type, "scalar", dst_type) == tl.float8e4nv and src.dtype.scalar == tl.float32:
        x = torch.from_numpy(np.ascontiguousarray(src.data)).clamp(-448.0, 448.0)
        return ti.TensorHandle(x.to(torch.float8_e4m3fn).view(torch.uint8).numpy(), tl.float8e4nv)
    return _orig_fp2fp(self, src, dst_type, rounding_mode)


ti.InterpreterBuilder.create_bitcast = _blocked(_orig_bitcast)
ti.InterpreterBuilder.create_fp_to_fp = _blocked(_torch_fp2fp)

import _fake_amdsmi  # noqa: E402
from vllm.models.deepseek_v4.common.ops import cache_utils  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402
from vllm.triton_utils import triton  # noqa: E402

SEED = 20261201  # fixed: the same inputs every run (a result is kept across runs; the randomized checks vary)
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


# float32 value -> e4m3fn byte with the saturation of the GPU's satfinite conversion. Written by hand
# from the format (bias 7, 3 mantissa bits, subnormals m * 2^-9, 0x7E = 448 the largest finite,
# S.1111.111 NaN), each checked against torch.float8_e4m3fn on the CPU when this table was written.
EDGE_CODES = [
    (0.0, 0x00), (-0.0, 0x80), (1e-40, 0x00), (-1e-40, 0x80), (2.0**-149, 0x00),
    (2.0**-10, 0x00), (-(2.0**-10), 0x80),            # tie between 0 and 2^-9: even
    (2.0**-10 * (1 + 2.0**-23), 0x01),                # just above it
    (2.0**-9, 0x01), (-(2.0**-9), 0x81),              # smallest subnormal
    (3 * 2.0**-10, 0x02), (5 * 2.0**-10, 0x02), (7 * 2.0**-10, 0x04),  # ties to even
    (7 * 2.0**-9, 0x07), (15 * 2.0**-10, 0x08), (2.0**-6, 0x08),       # carry into the normals
    (1.0, 0x38), (1.0625, 0x38), (1.1875, 0x3A), (240.0, 0x77), (416.0, 0x7D), (432.0, 0x7E),
    (448.0, 0x7E), (-448.0, 0xFE), (464.0, 0x7E), (465.0, 0x7E), (479.0, 0x7E), (480.0, 0x7E),
    (1e4, 0x7E), (float("inf"), 0x7E), (-465.0, 0xFE), (-480.0, 0xFE), (-1e4, 0xFE),
    (float("-inf"), 0xFE), (float("nan"), 0x7F), (-float("nan"), 0xFF),
]


@check
def encode_edge_codes():
    from vllm.v1.attention.ops.common import fp32_to_e4m3fn_manual as enc

    globals()["fp32_to_e4m3fn_manual"] = enc
    x = torch.tensor([v for v, _ in EDGE_CODES], dtype=torch.float32)
    out = torch.empty(x.numel(), dtype=torch.uint8)
    FP8_BLOCKED["on"] = True
    try:
        _encode[(1,)](x, out, x.numel(), BLOCK=64)
    finally:
        FP8_BLOCKED["on"] = False
    bad = [(v, hex(g), hex(w)) for (v, w), g in zip(EDGE_CODES, out.tolist()) if g != w]
    assert not bad, f"(value, got, want): {bad}"


def _on(arch: str, blocked: bool, fn):
    """fn() on a simulated ROCm `arch`, every FP8 cast failing if `blocked`. (is_cpu off too: from
    v0.33.0 the indexer query has a CPU op, taken before the Triton kernel.)"""
    plat = type(current_platform)
    orig = plat.is_rocm, plat.is_cpu
    _fake_amdsmi.set_arch(arch)
    plat.is_rocm, plat.is_cpu = (lambda self: True), (lambda self: False)
    FP8_BLOCKED["on"] = blocked
    try:
        return fn()
    finally:
        FP8_BLOCKED["on"] = False
        plat.is_rocm, plat.is_cpu = orig
        _fake_amdsmi.clear_gate()


def _both(fn):
    """fn's output on gfx936 without FP8 casts (the integer encode) and on gfx90a with the cast
    (torch's conversion, the oracle)."""
    return _on("gfx936", True, fn), _on("gfx90a", False, fn)


def _assert_same(name, got, want):
    got, want = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    assert got.any(), f"{name}: the writer wrote nothing"
    n = int((got != want).sum())
    assert n == 0, f"{name}: {n} of {got.numel()} bytes differ from the writer with torch's cast"


def _compressor_inputs(head_dim, compress_ratio, state_block, n, dtype):
    g = torch.Generator().manual_seed(SEED + head_dim + compress_ratio)
    coff = 2 if compress_ratio == 4 else 1
    pages = (compress_ratio * n - 1) // state_block + 2
    return dict(
        coff=coff,
        state=torch.randn(pages, state_block, 2 * coff * head_dim, generator=g).to(dtype),
        table=torch.arange(pages, dtype=torch.int32)[None],
        req=torch.zeros(n, dtype=torch.int32),
        slots=torch.arange(n, dtype=torch.int64),
        pos=torch.arange(compress_ratio - 1, compress_ratio * n, compress_ratio),
        w=torch.randn(head_dim, generator=g).bfloat16(),
        cs=torch.randn(compress_ratio * n, 64, generator=g),
    )


def _writer_modules():
    """The writer modules (the ops package's names for two of them are the functions)."""
    import importlib

    ops = "vllm.models.deepseek_v4.common.ops."
    fc, fq = (importlib.import_module(ops + n) for n in ("fused_compress_quant_cache", "fused_indexer_q"))
    fq.has_cutedsl = lambda: False  # the Triton kernel, not the CuTe DSL one (CUDA only)
    fc._n_cu = lambda: 8  # the two-stage split count asks the CUDA device for its SM count
    return fc, fq


@check
def writers_without_fp8_match_torch_cast():
    """Every writer gfx936 runs that the encode is used in, on gfx936 with FP8 casts failing, writes
    the bytes the same writer writes with torch's conversion as its cast: the indexer query
    quantizer, the single-stage compressors (sparse attention, head 512, and indexer, head 128) and
    the two-stage compressor (compress ratio 128). (The K cache writer: writer_without_fp8_...)"""
    from types import SimpleNamespace

    fc, fq = _writer_modules()

    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(5, 8, 128, generator=g).bfloat16()
    q[0, 0, :8] = torch.tensor([448.0, -448.0, 1e-3, -1e-3, 0.0, -0.0, 2.0**-9, 3.0]).bfloat16()
    pos = torch.randint(0, 64, (5,), generator=g)
    cs = torch.randn(64, 64, generator=g)
    wts = torch.randn(5, 8, generator=g).bfloat16()
    (qm, wm), (qc, wc) = _both(lambda: fq.fused_indexer_q_rope_quant(pos, q.clone(), cs, wts, 0.1, 0.2))
    _assert_same("fused_indexer_q_rope_quant", qm, qc)
    assert torch.equal(wm, wc), "fused_indexer_q_rope_quant: folded weights differ"

    for head, qb, ts, sd in ((512, 64, 576, 8), (128, 128, 128, 4)):
        n = 5
        i = _compressor_inputs(head, 4, 16, n, torch.bfloat16)

        def single():
            kv = torch.zeros(2, 16, ts + sd, dtype=torch.uint8)
            fc.compress_norm_rope_store_triton(
                i["state"], n, i["req"], i["pos"], i["slots"], i["table"], 16, i["coff"] * head,
                i["cs"], kv, SimpleNamespace(slot_mapping=i["slots"]), {}, head, 64, 4, True, False,
                i["w"], 1e-6, qb, ts, sd)
            return kv

        _assert_same(f"compress_norm_rope_store_triton (head {head})", *_both(single))

    n = 3
    i = _compressor_inputs(512, 128, 8, n, torch.float32)

    def two_stage():
        kv = torch.zeros(2, 16, 584, dtype=torch.uint8)
        fc._launch_two_stage_sparse_attn_compressor(
            i["state"], i["req"], i["pos"], i["slots"], i["table"], 8, 512, 128, i["cs"], kv,
            i["slots"], i["w"], 1e-6, 64, 576, 8, 512, 64, n, torch.empty(n, 512))
        return kv

    _assert_same("_launch_two_stage_sparse_attn_compressor", *_both(two_stage))


@check
def v32_indexer_q_launcher_refuses_rocm():
    """vllm/model_executor/layers/sparse_attn_indexer.py has its own _fused_indexer_q_rope_quant_kernel
    (DeepSeek V3.2, deepseek_v2.py, which takes it only on CUDA); its launcher asserts CUDA, so
    gfx936 never compiles that kernel's FP8 cast. Unchanged by the patch: pinned here because the
    patch leaves that kernel alone for this reason."""
    from vllm.model_executor.layers import sparse_attn_indexer as sai

    launched = []

    class _Recorder:
        def __getitem__(self, grid):
            return lambda *a, **kw: launched.append(kw)

    saved = sai._fused_indexer_q_rope_quant_kernel
    sai._fused_indexer_q_rope_quant_kernel = _Recorder()
    try:
        def call():
            try:
                sai.fused_indexer_q_rope_quant(
                    torch.zeros(1, dtype=torch.int64), torch.zeros(1, 1, 128, dtype=torch.bfloat16),
                    torch.zeros(4, 64), torch.zeros(1, 1), 1.0, 1.0, False)
            except AssertionError:
                return "refused"
            return "launched"

        got = _on("gfx936", False, call)
    finally:
        sai._fused_indexer_q_rope_quant_kernel = saved
    assert got == "refused" and not launched, f"on ROCm gfx936 the V3.2 launcher {got}"


@check
def every_writer_asks_for_integer_encode_only_on_gfx936():
    """Per arch, what each writer's launcher passes as its integer-encode constexpr (the kernels
    replaced by recorders): True on gfx936 only; never on gfx942, whose FP8 type is e4m3fnuz."""
    fc, fq = _writer_modules()

    seen = {}

    class _Recorder:
        """A Triton kernel (kernel[grid](...)) or a JIT-warmup kernel object (obj(...))."""

        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return self

        def __call__(self, *a, **kw):
            seen[self.name] = {"MANUAL_E4M3": kw.get("MANUAL_E4M3", kw.get("manual_e4m3", False))}

    def first(m, *names):
        return next((m, n) for n in names if hasattr(m, n))

    kernels = {  # v0.27.1 names first, then v0.33.0's kernel objects
        first(fq, "_fused_indexer_q_rope_quant_kernel", "_FUSED_INDEXER_Q_ROPE_QUANT_TRITON_KERNEL"): "indexer_q",
        (fc, "_fused_kv_compress_norm_rope_insert_sparse_attn"): "compressor",
        first(fc, "_FUSED_KV_COMPRESS_NORM_ROPE_INSERT_INDEXER_TRITON_KERNEL",
              "_fused_kv_compress_norm_rope_insert_indexer_attn"): "indexer_compressor",
        (fc, "_compress_gather_split_sparse_attn"): "split_gather",
        (fc, "_finalize_norm_rope_quant_store_sparse_attn"): "two_stage",
    }
    saved = {k: getattr(*k) for k in kernels}
    from types import SimpleNamespace

    i = _compressor_inputs(512, 128, 8, 1, torch.float32)
    got = {}
    try:
        for (m, name), short in kernels.items():
            setattr(m, name, _Recorder(short))
        for arch in ("gfx936", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):
            def launch_all():
                seen.clear()
                fq.fused_indexer_q_rope_quant(torch.zeros(1, dtype=torch.int64),
                                              torch.zeros(1, 1, 128, dtype=torch.bfloat16),
                                              torch.zeros(4, 64), torch.zeros(1, 1), 1.0, 1.0)
                kv = torch.zeros(1, 16, 584, dtype=torch.uint8)
                fc.compress_norm_rope_store_triton(
                    i["state"], 1, i["req"], i["pos"], i["slots"], i["table"], 8, 512, i["cs"], kv,
                    SimpleNamespace(slot_mapping=i["slots"]), {}, 512, 64, 128, False, False, i["w"],
                    1e-6, 64, 576, 8)
                kv = torch.zeros(1, 16, 132, dtype=torch.uint8)
                fc.compress_norm_rope_store_triton(
                    i["state"], 1, i["req"], i["pos"], i["slots"], i["table"], 8, 256, i["cs"], kv,
                    SimpleNamespace(slot_mapping=i["slots"]), {}, 128, 64, 4, True, False, i["w"],
                    1e-6, 128, 128, 4)
                fc._launch_two_stage_sparse_attn_compressor(
                    i["state"], i["req"], i["pos"], i["slots"], i["table"], 8, 512, 128, i["cs"], kv,
                    i["slots"], i["w"], 1e-6, 64, 576, 8, 512, 64, 1, torch.empty(1, 512))
                return {k: bool(kw.get("MANUAL_E4M3", False)) for k, kw in seen.items()
                        if k != "split_gather"}

            got[arch] = _on(arch, False, launch_all)
    finally:
        for (m, name), k in saved.items():
            setattr(m, name, k)
    want = {a: dict.fromkeys(("indexer_q", "compressor", "indexer_compressor", "two_stage"),
                             a == "gfx936") for a in got}
    assert got == want, f"integer e4m3 encode per arch and writer: got {got}, want {want}"


report()
