"""vllm 1 and 2 on a CUDA GPU (level `gpu`; run on the lent H200): the patched tree's
decode kernels and PyTorch reference decode, imported from the tree's own files through
_standalone_sparse_mla (no vLLM install needed), on caches with a padded block stride written by the
independent oracle encoder (kernels/fp8_ds_mla), all 256 byte values and the NaN codes planted.

Run: dsv4-patch regress vllm -m gpu --record gpu --hardware H200"""

from __future__ import annotations

import os

import pytest

from _cuda_torch import NEEDS_TORCH, cuda_torch
from _standalone_sparse_mla import load

# still collected without a GPU (regress names these ids), then skipped, not an error
torch, NO_GPU = cuda_torch()
if torch is not None:
    try:
        from kernels.fp8_ds_mla import naive
    except ImportError:  # the oracle's own dependencies: a skip, as for torch
        torch, NO_GPU = None, NEEDS_TORCH

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason=NO_GPU or "")]

NOPE, ROPE, SCALE = 448, 64, 0.05
DEV = "cuda"


@pytest.fixture(scope="module")
def mla(vllm_trees):
    return load(vllm_trees[0])


@pytest.fixture
def switches(monkeypatch):
    for name in ("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", "VLLM_ROCM_SPARSE_MLA_VALIDATE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def make_cache(gen, num_blocks=6, block_size=64, n=300, pad=1664, plant=True):
    """Oracle-written cache on the GPU in blocks whose stride exceeds a block; one token holds every
    byte value 0..255 in its NoPE (NaN codes 0x7F/0xFF among them) with scale bytes 127."""
    stride = block_size * 584 + pad
    store = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=gen).to(DEV)
    cache = store.as_strided((num_blocks, block_size, 584), (stride, 584, 1))
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:n].to(DEV)
    kv = torch.randn(n, 512, generator=gen) * torch.exp2(torch.randint(-8, 6, (n, 1), generator=gen).float())
    naive.encode(cache, slots, kv.to(DEV), block_size=block_size)
    if not plant:
        return cache, slots
    special = int(slots[5])
    b, p = divmod(special, block_size)
    raw = store.view(num_blocks, stride)
    raw[b, p * 576: p * 576 + 256] = torch.arange(256, dtype=torch.int32, device=DEV).to(torch.uint8)
    raw[b, block_size * 576 + p * 8: block_size * 576 + p * 8 + 7] = 127
    return cache, slots


def ragged(per_q):
    flat = torch.cat(per_q).to(torch.int32)
    indptr = torch.zeros(len(per_q) + 1, dtype=torch.int32, device=DEV)
    indptr[1:] = torch.cumsum(torch.tensor([len(s) for s in per_q], device=DEV), 0)
    return flat, indptr


def attention64(q, k_rows, sink):
    """float64 attention over oracle-dequantized K, NaN K as 0 (the kernels' semantics), V = K."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=DEV)
    amax = torch.zeros(q.shape[0], dtype=torch.float64, device=DEV)
    for i, k in enumerate(k_rows):
        k = torch.nan_to_num(k.double(), nan=0.0)
        amax[i] = k.abs().max()
        logits = (q[i].double() @ k.t()) * SCALE
        p = torch.softmax(torch.cat([logits, sink.double()[:, None]], 1), 1)[:, :-1]
        out[i] = p @ k
    return out, amax


def setup(gen, b=4, h=64):
    swa, swa_slots = make_cache(gen)
    extra, extra_slots = make_cache(gen, num_blocks=4, n=200, pad=96)
    q = (torch.randn(b, h, 512, generator=gen) * 0.5).bfloat16().to(DEV)
    sink = torch.randn(h, generator=gen).to(DEV)
    cut = [0, 1, 90, 200, 300]
    per_q = [swa_slots[cut[i]:cut[i + 1]] for i in range(b)]
    ecut = [0, 120, 120, 160, 200]
    per_q_extra = [extra_slots[ecut[i]:ecut[i + 1]] for i in range(b)]
    per_q[0] = torch.cat([per_q[0], swa_slots[5:6]])  # the all-codes token
    k_rows = [torch.cat([naive.dequantize(swa, s), naive.dequantize(extra, e)]) for s, e in zip(per_q, per_q_extra)]
    return swa, extra, q, sink, per_q, per_q_extra, k_rows


def test_reference_decode_on_gpu(mla):
    gen = torch.Generator().manual_seed(20261201)
    swa, extra, q, sink, per_q, per_q_extra, k_rows = setup(gen)
    slots = torch.cat(per_q)
    got = mla.dequantize_fp8_ds_mla_torch(swa, slots)
    want = naive.dequantize(swa, slots)
    assert torch.equal(got.isnan(), want.isnan()), "NaN positions differ from the oracle"
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), "dequantized K differs from the oracle"
    assert int(got.isnan().sum()) >= 2, "the planted NaN codes 0x7F/0xFF must stay visible"
    out, k_amax = mla._rocm_sparse_attn_decode_torch(q, swa, per_q, SCALE, sink, extra, per_q_extra)
    ref, amax = attention64(q, k_rows, sink)
    err = (out.double() - ref).abs().flatten(1).amax(1)
    assert torch.all(err <= 2.0**-8 * amax + 1e-30), f"reference decode vs float64: {err / amax}"
    assert torch.allclose(k_amax.double(), amax), "the reference's per-query max |K|"


@pytest.mark.parametrize("manual", [True, False], ids=["manual-e4m3", "hardware-e4m3"])
def test_decode_kernels_on_gpu(mla, switches, manual):
    """The ragged decode kernel (the path gfx936 takes) with the integer and with the hardware e4m3
    decode: bit-equal to each other, within 2^-7 of the query's max |K| of float64 attention and of
    patch 1's reference. The split-K path (gfx942/gfx950, FP8 cast only) is run against the same
    reference as a check of the oracle."""
    gen = torch.Generator().manual_seed(7)
    swa, extra, q, sink, per_q, per_q_extra, k_rows = setup(gen)
    (mi, mp), (ei, ep) = ragged(per_q), ragged(per_q_extra)

    gate = mla.use_manual_e4m3  # the launcher's integer-e4m3 predicate

    def run(gfx936, split):
        mla.use_manual_e4m3, mla._ON_GFX942 = (lambda: gfx936), split
        try:
            return mla._rocm_sparse_attn_decode_ragged_triton(
                q=q, main_cache=swa, main_indices=mi, main_indptr=mp, scale=SCALE, attn_sink=sink,
                nope_head_dim=NOPE, rope_head_dim=ROPE, extra_cache=extra, extra_indices=ei, extra_indptr=ep)
        finally:
            mla.use_manual_e4m3, mla._ON_GFX942 = gate, False

    out = run(manual, split=False)
    other = run(not manual, split=False)
    assert torch.equal(out.view(torch.int16), other.view(torch.int16)), "manual and hardware decode differ"
    ref, amax = attention64(q, k_rows, sink)
    torch_ref, _ = mla._rocm_sparse_attn_decode_torch(q, swa, per_q, SCALE, sink, extra, per_q_extra)
    for name, want in (("float64 attention", ref), ("torch reference", torch_ref.double())):
        err = (out.double() - want).abs().flatten(1).amax(1)
        assert torch.all(err <= 2.0**-7 * amax), f"kernel vs {name}: {(err / amax).tolist()}"
    split = run(False, split=True).double()
    err = (split - ref).abs().flatten(1).amax(1)
    assert torch.all(err <= 2.0**-7 * amax), f"split-K kernel vs float64 attention: {(err / amax).tolist()}"


def _decode_args(per_q):
    """Index tensors for rocm_sparse_attn_decode, built before any capture (host -> device)."""
    mi, mp = ragged(per_q)
    dense = torch.full((len(per_q), max(len(s) for s in per_q)), -1, dtype=torch.int32, device=DEV)
    lens = torch.tensor([len(s) for s in per_q], dtype=torch.int32, device=DEV)
    return dict(swa_indices=dense, swa_lens=lens, swa_ragged_indices=mi, swa_ragged_indptr=mp)


def _decode(mla, q, swa, idx, sink, out):
    mla.rocm_sparse_attn_decode(
        q=q, kv_cache=None, swa_k_cache=swa, swa_only=True, topk_indices=None, topk_lens=None,
        topk_ragged_indices=None, topk_ragged_indptr=None, attn_sink=sink, scale=SCALE, head_dim=512,
        nope_head_dim=NOPE, rope_head_dim=ROPE, output=out, **idx)


def test_reference_decode_refuses_capture(mla, switches):
    """Under torch.cuda.graph: the Triton decode (switches off, integer e4m3 decode) captures and its
    replay equals eager; with VLLM_ROCM_SPARSE_MLA_TORCH_DECODE or _VALIDATE set the decode raises its
    clear error instead of a stream-capture failure, and works again outside the capture."""
    gen = torch.Generator().manual_seed(3)
    swa, slots = make_cache(gen, plant=False)  # clean: validation passes it
    q = (torch.randn(3, 64, 512, generator=gen) * 0.5).bfloat16().to(DEV)
    sink = torch.randn(64, generator=gen).to(DEV)
    idx = _decode_args([slots[:128], slots[128:129], slots[129:300]])
    gate = mla.use_manual_e4m3
    mla.use_manual_e4m3 = lambda: True  # the gfx936 path: integer e4m3 decode
    try:
        out = torch.empty_like(q)
        _decode(mla, q, swa, idx, sink, out)  # compile outside the capture
        eager = out.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _decode(mla, q, swa, idx, sink, out)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager), "graph replay differs from eager"
        for env in ("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", "VLLM_ROCM_SPARSE_MLA_VALIDATE"):
            switches.setenv(env, "1")
            with pytest.raises(RuntimeError, match="CUDA graph"):
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    _decode(mla, q, swa, idx, sink, out)
            _decode(mla, q, swa, idx, sink, out)  # eager: runs
            torch.cuda.synchronize()
            switches.delenv(env)
    finally:
        mla.use_manual_e4m3 = gate
