"""vllm 2: the Triton sparse decode with the manual OCP E4M3 decode, run with TRITON_INTERPRET=1."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter as ti

from _harness import check, report
from kernels import codecs
from kernels.fp8_ds_mla import naive

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

import vllm.v1.attention.ops.rocm_aiter_mla_sparse as m  # noqa: E402
from vllm.triton_utils import triton  # noqa: E402

SEED = int.from_bytes(os.urandom(4), "little")
print("seed", SEED)
gen = torch.Generator().manual_seed(SEED)


_DEC = getattr(m, "_e4m3fn_to_bf16_manual", None)


@triton.jit
def _decode_256(x_ptr, o_ptr):
    offs = tl.arange(0, 256)
    tl.store(o_ptr + offs, _DEC(tl.load(x_ptr + offs)).to(tl.float32))


@check
def manual_decode_all_256_codes():
    assert _DEC is not None, "rocm_aiter_mla_sparse has no _e4m3fn_to_bf16_manual"
    k = _decode_256
    codes = torch.arange(256, dtype=torch.uint8)
    out = torch.empty(256, dtype=torch.float32)
    FP8_BLOCKED["on"] = True
    try:
        k[(1,)](codes, out)
    finally:
        FP8_BLOCKED["on"] = False
    got = out.double().numpy()
    oracle = codecs.e4m3_decode(np.arange(256, dtype=np.uint8))
    hw = codes.view(torch.float8_e4m3fn).double().numpy()
    for name, want in (("float64 oracle", oracle), ("torch float8_e4m3fn", hw)):
        same = (np.isnan(want) & np.isnan(got)) | ((want == got) & (np.signbit(want) == np.signbit(got)))
        bad = np.flatnonzero(~same)
        assert bad.size == 0, f"{bad.size} codes differ from the {name}, first {[hex(b) for b in bad[:5]]}"
    assert np.isnan(got).sum() == 2 and np.isnan(got[0x7F]) and np.isnan(got[0xFF])


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
    ref = m._rocm_sparse_attn_decode_torch(q, cache, [slots[:37], slots[37:90]], 0.05, sink)
    err = (out.double() - ref.double()).abs().max().item()
    assert err <= 2.0**-6 * ref.double().abs().max().item(), f"kernel vs torch reference max_abs {err}"
    hw = _run_kernel(store, cache, slots, indptr, q, sink, manual=False)
    assert torch.equal(out.view(torch.int16), hw.view(torch.int16)), "manual and hardware decode differ"


@check
def manual_decode_selected_without_fp8():
    assert m._lacks_fp8_conversion("gfx936")
    assert m._lacks_fp8_conversion("gfx936:sramecc+:xnack-")
    for arch in ("gfx942", "gfx942:sramecc+:xnack-", "gfx950", "gfx1200", "gfx1201"):
        assert not m._lacks_fp8_conversion(arch), arch
    assert not m._lacks_fp8_conversion("")  # not ROCm


report()
