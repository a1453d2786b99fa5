"""vllm 2: the Triton sparse decode with the manual OCP E4M3 decode, run with TRITON_INTERPRET=1."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter as ti

from _harness import check, report, seed
from dsv4_kernels import codecs
from dsv4_kernels.fp8_ds_mla import naive

# --- Triton 3.9's interpreter keeps bfloat16 as raw uint16 and runs np.matmul / np.multiply /
# comparisons on those bits. GPUs compute bf16 arithmetic in fp32 and round; do the same here so
# the kernels' bf16 products and dots mean what they mean on a device.
def _f32(h):
    if h.dtype.scalar == tl.bfloat16:
        return ti.TensorHandle(ti._convert_float(h.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32)
    return h


_orig_dot, _orig_bin = ti.InterpreterBuilder.create_dot, ti.InterpreterBuilder.binary_op


def _dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    return _orig_dot(self, _f32(a), _f32(b), d, input_precision, max_num_imprecise_acc)


def _bin(self, lhs, rhs, op):
    if lhs.dtype.scalar == tl.bfloat16 and rhs.dtype.scalar == tl.bfloat16:
        out = _orig_bin(self, _f32(lhs), _f32(rhs), op)
        if out.data.dtype == np.float32:
            bf = ti._convert_float(out.data, tl.float32, tl.bfloat16, None).view(np.uint16)
            return ti.TensorHandle(bf, tl.bfloat16)
        return out
    return _orig_bin(self, lhs, rhs, op)


ti.InterpreterBuilder.create_dot, ti.InterpreterBuilder.binary_op = _dot, _bin

# --- "no FP8 conversion" (gfx936 under DTK Triton): any cast to or from an fp8 type fails.
FP8_BLOCKED = {"on": False}
_orig_bitcast, _orig_fp2fp = ti.InterpreterBuilder.create_bitcast, ti.InterpreterBuilder.create_fp_to_fp


def _is_fp8(t):
    t = getattr(t, "scalar", t)
    return getattr(t, "is_fp8", lambda: False)()


def _bitcast(self, src, dst_type):
    if FP8_BLOCKED["on"] and (_is_fp8(dst_type) or _is_fp8(src.dtype)):
        raise RuntimeError("FP8 conversion is not supported on this target (simulated gfx936)")
    return _orig_bitcast(self, src, dst_type)


def _fp2fp(self, src, dst_type, rounding_mode):
    if FP8_BLOCKED["on"] and (_is_fp8(dst_type) or _is_fp8(src.dtype)):
        raise RuntimeError("FP8 conversion is not supported on this target (simulated gfx936)")
    return _orig_fp2fp(self, src, dst_type, rounding_mode)


ti.InterpreterBuilder.create_bitcast, ti.InterpreterBuilder.create_fp_to_fp = _bitcast, _fp2fp

import _fake_amdsmi  # noqa: E402
import vllm.v1.attention.ops.rocm_aiter_mla_sparse as m  # noqa: E402
from vllm.models.deepseek_v4.common.ops import cache_utils  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402
from vllm.triton_utils import triton  # noqa: E402

SEED = seed(os.environ.get("DSV4_SEED"))  # the run's seed (tests/conftest.py); printed
gen = torch.Generator().manual_seed(SEED)


def _codes_cache():
    """One token whose NoPE holds all 256 e4m3 codes (then 192 zeros), scale bytes 127 (x1), in a
    block with a padded stride."""
    stride = 64 * 584 + 512
    store = torch.zeros(stride, dtype=torch.uint8)
    cache = store.as_strided((1, 64, 584), (stride, 584, 1))
    store[:256] = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    store[64 * 576: 64 * 576 + 7] = 127
    return store, cache


def _cache(num_blocks=3, block_size=64, n=90):
    stride = block_size * 584 + 1024
    store = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=gen)
    cache = store.as_strided((num_blocks, block_size, 584), (stride, 584, 1))
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:n]
    kv = torch.randn(n, 512, generator=gen) * torch.exp2(torch.randint(-6, 6, (n, 1), generator=gen).float())
    kv[0, :64] = 0.0
    naive.encode(cache, slots, kv, block_size=block_size)
    # e4m3 subnormal codes and signed zeros in one token
    raw = store.view(num_blocks, stride)
    s = int(slots[1]); b, p = divmod(s, block_size)
    raw[b, p * 576: p * 576 + 16] = torch.tensor([0x00, 0x80, 0x01, 0x81, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                                   0x87, 0x08, 0x7E, 0xFE, 0x3F, 0xBF], dtype=torch.uint8)
    return store, cache, slots


def _run_kernel(store, cache, slots, indptr, q, sink, manual):
    b, h, _ = q.shape
    out = torch.full((b, h, 512), 7.0, dtype=torch.bfloat16)
    kern = m._sparse_attn_decode_ragged_kernel
    extra = {"MANUAL_E4M3": True} if (manual and "MANUAL_E4M3" in kern.arg_names) else {}
    if not manual and "MANUAL_E4M3" in kern.arg_names:
        extra = {"MANUAL_E4M3": False}
    rows = cache.shape[0] * cache.shape[1]
    # the interpreter copies each tensor argument; pass the cache's whole storage so the kernel's
    # stride(0) addressing walks the same bytes it does on a device.
    kern[(b, triton.cdiv(h, 16))](
        q, store, slots.to(torch.int32), indptr, store, torch.empty(0, dtype=torch.int32),
        torch.zeros(b + 1, dtype=torch.int32), sink, out,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), cache.stride(0), cache.stride(0),
        rows, rows, cache.shape[1], cache.shape[1], 0.05, h,
        HAS_ATTN_SINK=True, HAS_EXTRA=False, NOPE_DIM=448, NOPE_BLOCK=512, ROPE_DIM=64,
        IS_FNUZ_MAIN=False, IS_FNUZ_EXTRA=False, BLOCK_H=16, BLOCK_K=16, **extra)
    return out


@check
def manual_decode_all_256_codes():
    """Through the decode kernel with FP8 casts failing: one query, one slot, q = e_j picks K's
    value j back out of the softmax (one key: p = 1, out = K)."""
    store, cache = _codes_cache()
    q = torch.zeros(1, 16, 512, dtype=torch.bfloat16)
    FP8_BLOCKED["on"] = True
    try:
        out = _run_kernel(store, cache, torch.tensor([0]), torch.tensor([0, 1], dtype=torch.int32), q,
                          torch.full((16,), -1e30), manual=True)
    finally:
        FP8_BLOCKED["on"] = False
    got = out[0, 0, :256].double().numpy()
    oracle = codecs.e4m3_decode(np.arange(256, dtype=np.uint8))
    want = np.where(np.isnan(oracle), 0.0, oracle)  # the kernel replaces NaN K by 0
    # The kernel accumulates P @ V from +0, so a -0 key comes out +0 (as with the FP8 cast): signs
    # are compared for non-zero values; the signed-zero bits are the helper's own unit test.
    same = (want == got) & ((np.signbit(want) == np.signbit(got)) | (want == 0))
    same[[0x7F, 0xFF]] = got[[0x7F, 0xFF]] == 0.0
    bad = np.flatnonzero(~same)
    assert bad.size == 0, f"{bad.size} codes differ from the float64 oracle, first {[hex(b) for b in bad[:5]]}"


@check
def decode_kernel_without_fp8_matches_reference():
    store, cache, slots = _cache()
    b, h = 2, 16
    q = (torch.randn(b, h, 512, generator=gen) * 0.5).bfloat16()
    sink = torch.randn(h, generator=gen)
    indptr = torch.tensor([0, 37, 90], dtype=torch.int32)
    FP8_BLOCKED["on"] = True
    try:
        out = _run_kernel(store, cache, slots, indptr, q, sink, manual=True)
    finally:
        FP8_BLOCKED["on"] = False
    # float64 attention over the oracle's dequantized K (V = K, sink in the denominator)
    for i in range(b):
        k = naive.dequantize(cache, slots[indptr[i]:indptr[i + 1]].long()).double()
        logits = (q[i].double() @ k.t()) * 0.05
        p = torch.softmax(torch.cat([logits, sink.double()[:, None]], 1), 1)[:, :-1]
        want = p @ k
        err = (out[i].double() - want).abs().max().item()
        tol = 2.0**-6 * want.abs().max().item()
        assert err <= tol, f"query {i}: kernel vs float64 reference max_abs {err} > {tol}"
    # the PyTorch reference decode of the same tree agrees, and the hardware cast gives the same bits
    ref, _ = m._rocm_sparse_attn_decode_torch(q, cache, [slots[:37], slots[37:90]], 0.05, sink)
    err = (out.double() - ref.double()).abs().max().item()
    assert err <= 2.0**-6 * ref.double().abs().max().item(), f"kernel vs torch reference max_abs {err}"
    hw = _run_kernel(store, cache, slots, indptr, q, sink, manual=False)
    assert torch.equal(out.view(torch.int16), hw.view(torch.int16)), "manual and hardware decode differ"


class _Recorder:
    """Stands in for a Triton kernel: kernel[grid](...) records the launch's constexprs."""

    def __init__(self, launches, name):
        self.launches, self.name = launches, name

    def __getitem__(self, grid):
        return lambda *a, **kw: self.launches.append((self.name, kw))


def _launch_constexprs(arch: str) -> dict:
    """The ragged kernel's keyword arguments as the launcher passes them on `arch` (meta tensors:
    nothing runs). The module's arch flags are rebound from vllm.platforms.rocm reloaded for `arch`,
    as its `from vllm.platforms.rocm import ...` does on ROCm (a reload of the module itself would
    register its custom ops twice)."""
    rocm = _fake_amdsmi.set_arch(arch)
    names = ("_sparse_attn_decode_ragged_kernel", "_sparse_attn_decode_partial_kernel",
             "_sparse_attn_decode_reduce_kernel", "_decode_cu_count",
             *(n for n in ("_ON_GFX936", "_ON_GFX942", "_ON_GFX950") if hasattr(m, n)))
    saved = {n: getattr(m, n) for n in names if hasattr(m, n)}
    launches = []
    # On ROCm: the patched launcher asks use_manual_e4m3() (from the tree's ops/common.py), which
    # checks the platform before the arch.
    orig_is_rocm = type(current_platform).is_rocm
    type(current_platform).is_rocm = lambda self: True
    try:
        for n in ("_ON_GFX936", "_ON_GFX942", "_ON_GFX950"):
            if n in saved:
                setattr(m, n, getattr(rocm, n, False))
        for n in names[:3]:
            if n in saved:
                setattr(m, n, _Recorder(launches, n))
        m._decode_cu_count = lambda: 304  # the split heuristic asks the device otherwise
        meta = torch.device("meta")
        try:
            _call_launcher(meta)
        except NotImplementedError:  # a split-K path reading index values (v0.33.0): not ragged
            pass
    finally:
        for n, v in saved.items():
            setattr(m, n, v)
        type(current_platform).is_rocm = orig_is_rocm
        _fake_amdsmi.clear_gate()
    return {name: kw for name, kw in launches}


def _call_launcher(meta):
    m._rocm_sparse_attn_decode_ragged_triton(
        q=torch.empty(2, 16, 512, dtype=torch.bfloat16, device=meta),
        main_cache=torch.empty(3, 64, 584, dtype=torch.uint8, device=meta),
        main_indices=torch.empty(8, dtype=torch.int32, device=meta),
        main_indptr=torch.empty(3, dtype=torch.int32, device=meta),
        scale=0.05, attn_sink=None, nope_head_dim=448, rope_head_dim=64)


@check
def manual_decode_only_on_gfx936():
    got = {}
    for arch in ("gfx936", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):
        launches = _launch_constexprs(arch)
        ragged = launches.get("_sparse_attn_decode_ragged_kernel")
        got[arch] = None if ragged is None else bool(ragged.get("MANUAL_E4M3", False))
    # gfx942/gfx950 take the split-K kernels (FP8 conversion there); the others the ragged one.
    want = {"gfx936": True, "gfx90a": False, "gfx942": None, "gfx950": None, "gfx1100": False,
            "gfx1201": False}
    assert got == want, f"integer e4m3 decode per arch (None: split-K path): got {got}, want {want}"


def _gather_matches_oracle(mod, model):
    stride = 16 * 584 + 320
    num_blocks = 4
    store = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=gen)
    cache = store.as_strided((num_blocks, 16, 584), (stride, 584, 1))
    slots = torch.arange(num_blocks * 16)
    kv = torch.randn(slots.numel(), 512, generator=gen)
    naive.encode(cache, slots, kv, block_size=16)
    raw = store.view(num_blocks, stride)
    raw[2, 5 * 576: 5 * 576 + 256] = torch.arange(256, dtype=torch.int32).to(torch.uint8)  # all codes
    seq_lens = torch.tensor([37, 20], dtype=torch.int32)
    block_table = torch.tensor([[3, 0, 2, 1], [2, 1, 0, 3]], dtype=torch.int32)
    out = torch.zeros(2, 40, 512, dtype=torch.bfloat16)
    _fake_amdsmi.set_arch("gfx936")
    orig_is_rocm, orig_cutedsl = type(current_platform).is_rocm, mod.has_cutedsl
    type(current_platform).is_rocm = lambda self: True
    mod.has_cutedsl = lambda: False  # the Triton gather, as on ROCm
    FP8_BLOCKED["on"] = True
    try:
        # the interpreter copies tensor arguments: hand it the whole storage (block stride kept)
        mod.dequantize_and_gather_k_cache(
            out, store.as_strided((num_blocks, 16, 584), (stride, 584, 1)), seq_lens, None, block_table,
            16, offset=0)
    except Exception as e:  # the interpreter wraps the kernel's error
        raise AssertionError(f"{model}'s gather: {e}") from e
    finally:
        FP8_BLOCKED["on"] = False
        type(current_platform).is_rocm, mod.has_cutedsl = orig_is_rocm, orig_cutedsl
        _fake_amdsmi.clear_gate()
    for r in range(2):
        n = int(seq_lens[r])
        pos = torch.arange(n)
        rows = block_table[r, pos // 16].long() * 16 + pos % 16
        want = naive.dequantize(cache, rows, block_size=16).bfloat16()
        got = out[r, :n]
        assert torch.equal(got.isnan(), want.isnan()), f"{model}, request {r}: NaN positions differ"
        assert torch.equal(got.nan_to_num(), want.nan_to_num()), (
            f"{model}, request {r}: gather differs from the oracle, max_abs "
            f"{(got.float() - want.float()).nan_to_num().abs().max().item()}")


@check
def prefill_gather_without_fp8_matches_cast():
    """dequantize_and_gather_k_cache on gfx936 with FP8 casts failing equals the oracle: DeepSeek
    V4's, and V4.1's where the tree has it (V4.1's ROCm attention gathers its fp8_ds_mla K for
    prefill through its own kernels)."""
    import importlib
    try:
        v41 = importlib.import_module("vllm.models.deepseek_v41.common.ops.cache_utils")
    except ModuleNotFoundError:
        v41 = None  # a tree without DeepSeek V4.1
    _gather_matches_oracle(cache_utils, "DeepSeek V4")
    if v41 is not None:
        _gather_matches_oracle(v41, "DeepSeek V4.1")



# --- the launcher's branch for archs other than gfx942/gfx950 (gfx936's path) -----------------------
# It runs without FP8 casts on gfx936, and -- in trees whose launcher takes inverse-RoPE positions
# (rocm_sparse_attn_decode then reports every row as rotated) -- hands back inverse-RoPE'd rows.
import inspect  # noqa: E402
import textwrap  # noqa: E402

from _harness import NotApplicable  # noqa: E402


# The launcher asserts its tensors are on a device; the interpreter runs them on the CPU. Rebuild it
# from its own source with only that assert removed (everything else is the module's code).
def _cpu_launcher():
    if not hasattr(m, "_rocm_sparse_attn_decode_ragged_triton"):
        raise NotApplicable("rocm_aiter_mla_sparse has no _rocm_sparse_attn_decode_ragged_triton launcher")
    src = textwrap.dedent(inspect.getsource(m._rocm_sparse_attn_decode_ragged_triton))
    cut = src.find("    assert (\n        not q.is_cpu")
    if cut < 0:
        raise AssertionError("the launcher's device assert changed: rebuild it for the interpreter another way")
    end = src.index(")\n", cut) + 2
    ns: dict = {}
    exec(compile(src[:cut] + src[end:], m.__file__, "exec"), m.__dict__, ns)
    return ns["_rocm_sparse_attn_decode_ragged_triton"]


B, H, BLOCK = 2, 16, 64


def _inputs():
    nb = 3
    store = torch.zeros(nb * BLOCK * 584, dtype=torch.uint8)
    cache = store.view(nb, BLOCK, 584)  # contiguous: the interpreter's copy keeps the addressing
    n = 70
    slots = torch.randperm(nb * BLOCK, generator=gen)[:n]
    kv = torch.randn(n, 512, generator=gen)
    naive.encode(cache, slots, kv, block_size=BLOCK)
    q = (torch.randn(B, H, 512, generator=gen) * 0.5).bfloat16()
    indptr = torch.tensor([0, 30, n], dtype=torch.int32)
    sink = torch.randn(H, generator=gen)
    pos = torch.tensor([5, 17], dtype=torch.int64)
    ang = torch.rand(32, 32, generator=gen) * 6.0
    cos_sin = torch.cat([ang.cos(), ang.sin()], dim=1).float()  # [P, 64] = cos | sin
    return cache, slots.to(torch.int32), indptr, q, sink, pos, cos_sin


def _run(cache, slots, indptr, q, sink, **kw):
    return _cpu_launcher()(q=q, main_cache=cache, main_indices=slots, main_indptr=indptr, scale=0.05,
                           attn_sink=sink, nope_head_dim=448, rope_head_dim=64, **kw)


def _inverse_rope(o, pos, cos_sin):
    """Independent inverse GPT-J RoPE on the last 64 lanes (fp32, rounded to bf16)."""
    out = o.clone()
    a, b = o[..., 448::2].float(), o[..., 449::2].float()
    cs = cos_sin[pos]  # [B, 64]
    cos, sin = cs[:, None, :32], cs[:, None, 32:]
    out[..., 448::2] = (a * cos + b * sin).bfloat16()
    out[..., 449::2] = (b * cos - a * sin).bfloat16()
    return out


@check
def fallback_launcher_without_fp8():
    assert not (m._ON_GFX942 or m._ON_GFX950)  # the launcher's branch for every other arch
    # The launcher's integer-e4m3 predicate (ops/common.py's use_manual_e4m3, imported by the module).
    assert hasattr(m, "use_manual_e4m3"), "rocm_aiter_mla_sparse does not tell gfx936 apart"
    cache, slots, indptr, q, sink, _, _ = _inputs()
    hw = _run(cache, slots, indptr, q, sink)
    saved = m.use_manual_e4m3
    m.use_manual_e4m3 = lambda: True  # what it gives on gfx936
    FP8_BLOCKED["on"] = True
    try:
        out = _run(cache, slots, indptr, q, sink)
    finally:
        FP8_BLOCKED["on"] = False
        m.use_manual_e4m3 = saved
    assert torch.equal(out.view(torch.int16), hw.view(torch.int16)), "manual and hardware decode differ"


@check
def fallback_applies_inverse_rope():
    """Through rocm_sparse_attn_decode, the public entry the attention calls (the launcher below it
    rebuilt for the interpreter): the rows it reports rotated come back inverse-RoPE'd."""
    params = inspect.signature(m.rocm_sparse_attn_decode).parameters
    if "inv_rope_positions" not in params:
        raise NotApplicable("rocm_sparse_attn_decode takes no inv_rope_positions (no fused inverse RoPE in this tree)")
    cache, slots, indptr, q, sink, pos, cos_sin = _inputs()
    lens = indptr[1:] - indptr[:-1]
    dense = torch.full((B, int(lens.max())), -1, dtype=torch.int32)
    for b in range(B):
        dense[b, : int(lens[b])] = slots[int(indptr[b]): int(indptr[b + 1])]

    def decode(**rope):
        out = torch.empty(B, H, 512, dtype=torch.bfloat16)
        n = m.rocm_sparse_attn_decode(
            q=q, kv_cache=None, swa_k_cache=cache, swa_only=True, topk_indices=None, topk_lens=None,
            swa_indices=dense, swa_lens=lens, swa_ragged_indices=slots, swa_ragged_indptr=indptr,
            topk_ragged_indices=None, topk_ragged_indptr=None, attn_sink=sink, scale=0.05, head_dim=512,
            nope_head_dim=448, rope_head_dim=64, output=out, **rope)
        return n, out

    saved = m._rocm_sparse_attn_decode_ragged_triton
    m._rocm_sparse_attn_decode_ragged_triton = _cpu_launcher()
    try:
        none_rotated, plain = decode()
        n, rotated = decode(inv_rope_positions=pos, inv_rope_cos_sin_cache=cos_sin)
    finally:
        m._rocm_sparse_attn_decode_ragged_triton = saved
    assert none_rotated == 0, f"{none_rotated} rows reported rotated without positions"
    assert n == B, f"{n} of {B} rows reported rotated with positions"
    assert not torch.equal(rotated[:n], plain[:n]), "rows reported rotated came back not rotated"
    want = _inverse_rope(plain, pos, cos_sin)
    assert torch.equal(rotated[:n, :, :448], plain[:n, :, :448]), "NoPE lanes changed"
    err = (rotated[:n].double() - want[:n].double()).abs().max().item()
    assert err <= 2.0**-7 * want.double().abs().max().item(), f"inverse RoPE off: max_abs {err}"


report()
