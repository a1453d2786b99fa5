"""vllm 1: the PyTorch reference decode of the fp8_ds_mla cache vs the oracle (kernels/fp8_ds_mla)."""

from __future__ import annotations

import os
import types

import torch

from _harness import check, report, seed
from dsv4_kernels.fp8_ds_mla import naive

import vllm.v1.attention.ops.rocm_aiter_mla_sparse as m

SEED = seed(os.environ.get("DSV4_SEED"))  # the run's seed (tests/conftest.py); printed
gen = torch.Generator().manual_seed(SEED)
NOPE, ROPE = 448, 64


def make_cache(num_blocks: int, block_size: int, n: int, *, pad: int = 1500):
    """A cache whose block stride is larger than a block (as the allocator gives it), filled by the
    oracle encoder; returns (cache, slots written, kv)."""
    stride = block_size * 584 + pad
    store = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=gen)
    cache = store.as_strided((num_blocks, block_size, 584), (stride, 584, 1))
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:n]
    slots[0] = 0
    slots[-1] = num_blocks * block_size - 1
    mag = torch.exp2(torch.randint(-12, 9, (n, 1), generator=gen).float())
    kv = torch.randn(n, 512, generator=gen) * mag
    kv[1, :64] = 0.0                       # an all-zero scale group
    kv[2, 64:128] = 448.0 * 2.0**-20        # tiny values
    naive.encode(cache, slots, kv, block_size=block_size)
    return cache, slots, kv


def ref_attention(q, k_rows: list[torch.Tensor], scale, sink):
    """float64 attention from oracle-dequantized K (V = K), sink in the denominator."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    for i, k in enumerate(k_rows):
        if k.shape[0] == 0:
            continue
        k = k.double()
        logits = (q[i].double() @ k.t()) * scale
        if sink is not None:
            full = torch.cat([logits, sink.double()[:, None]], dim=1)
            p = torch.softmax(full, dim=1)[:, :-1]
        else:
            p = torch.softmax(logits, dim=1)
        out[i] = p @ k
    return out


def decode(q, swa_cache, swa_slots_per_q, extra_cache=None, extra_slots_per_q=None, *, sink=None,
           scale=0.05, ragged=True):
    b, h, _ = q.shape
    out = torch.full((b, h, 512), float("nan"), dtype=torch.bfloat16)
    lens = torch.tensor([len(s) for s in swa_slots_per_q], dtype=torch.int32)
    width = max(1, int(lens.max()))
    dense = torch.full((b, width), -1, dtype=torch.int32)
    for i, s in enumerate(swa_slots_per_q):
        dense[i, : len(s)] = s
    indptr = torch.zeros(b + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    flat = torch.cat([s.to(torch.int32) for s in swa_slots_per_q])
    kw = dict(kv_cache=None, swa_only=True, topk_indices=None, topk_lens=None,
              topk_ragged_indices=None, topk_ragged_indptr=None)
    if extra_cache is not None:
        elens = torch.tensor([len(s) for s in extra_slots_per_q], dtype=torch.int32)
        eptr = torch.zeros(b + 1, dtype=torch.int32)
        eptr[1:] = torch.cumsum(elens, 0)
        ewidth = max(1, int(elens.max()))
        edense = torch.full((b, ewidth), -1, dtype=torch.int32)
        for i, s in enumerate(extra_slots_per_q):
            edense[i, : len(s)] = s
        kw = dict(kv_cache=extra_cache, swa_only=False, topk_indices=edense, topk_lens=elens,
                  topk_ragged_indices=torch.cat([s.to(torch.int32) for s in extra_slots_per_q]) if ragged else None,
                  topk_ragged_indptr=eptr if ragged else None)
    m.rocm_sparse_attn_decode(
        q=q, swa_k_cache=swa_cache, swa_indices=dense, swa_lens=lens,
        swa_ragged_indices=flat if ragged else None, swa_ragged_indptr=indptr if ragged else None,
        attn_sink=sink, scale=scale, head_dim=512, nope_head_dim=NOPE, rope_head_dim=ROPE,
        output=out, **kw)
    return out


@check
def reader_matches_oracle():
    for num_blocks, block_size, n in ((6, 64, 200), (3, 16, 40), (1, 64, 64)):
        cache, slots, _ = make_cache(num_blocks, block_size, n)
        got = m.dequantize_fp8_ds_mla_torch(cache, slots)
        want = naive.dequantize(cache, slots, block_size=block_size)
        assert got.dtype == torch.float32 and got.shape == (n, 512), (got.dtype, got.shape)
        assert not torch.isnan(got).any(), "NaN in the dequantized K"
        diff = (got - want).abs().max().item()
        assert diff == 0.0, f"max_abs {diff} vs the oracle (block_size {block_size})"
        # the first gfx936 (contiguous) reader disagrees on the same bytes: the check can see a layout bug
        wrong = naive.wrong_contiguous_reader(cache, slots, block_size=block_size)
        assert not torch.equal(torch.nan_to_num(wrong), want), "oracle cannot tell the layouts apart"
    # invalid slots give zero rows
    got = m.dequantize_fp8_ds_mla_torch(cache, torch.tensor([-1, num_blocks * block_size]))
    assert torch.equal(got, torch.zeros_like(got))


@check
def decode_matches_reference_attention():
    os.environ["VLLM_ROCM_SPARSE_MLA_TORCH_DECODE"] = "1"
    swa, swa_slots, _ = make_cache(4, 64, 150)
    extra, extra_slots, _ = make_cache(3, 64, 120)
    b, h = 3, 16
    q = (torch.randn(b, h, 512, generator=gen) * 0.5).bfloat16()
    sink = torch.randn(h, generator=gen)
    per_q = [swa_slots[:50], swa_slots[50:51], swa_slots[51:150]]
    per_q_extra = [extra_slots[:70], extra_slots[70:70], extra_slots[70:120]]
    for ragged in (True, False):
        out = decode(q, swa, per_q, extra, per_q_extra, sink=sink, ragged=ragged)
        k_rows = [torch.cat([naive.dequantize(swa, s), naive.dequantize(extra, e)])
                  for s, e in zip(per_q, per_q_extra)]
        want = ref_attention(q, k_rows, 0.05, sink)
        assert torch.isfinite(out.float()).all(), "non-finite decode output"
        err = (out.double() - want).abs().max().item()
        tol = 2.0**-7 * want.abs().max().item()
        assert err <= tol, f"decode vs float64 reference: max_abs {err} > {tol} (ragged={ragged})"
    # SWA only, no sink
    out = decode(q, swa, per_q, sink=None)
    want = ref_attention(q, [naive.dequantize(swa, s) for s in per_q], 0.05, None)
    err = (out.double() - want).abs().max().item()
    assert err <= 2.0**-7 * want.abs().max().item(), f"swa-only decode: max_abs {err}"


def _nan_cache(where: str):
    swa, slots, _ = make_cache(2, 64, 60)
    raw = swa.as_strided((2, 64 * 584), (swa.stride(0), 1))
    s = int(slots[7])
    block, pos = divmod(s, 64)
    if where == "nope":
        raw[block, pos * 576 + 100] = 0x7F      # the e4m3 NaN code
    else:
        raw[block, pos * 576 + 448 + 2 * 10 + 1] = 0x7F  # bf16 high byte 0x7F, low byte
        raw[block, pos * 576 + 448 + 2 * 10] = 0xC0      # 0x7FC0 = NaN
    return swa, slots


@check
def validate_raises_on_nan():
    q = torch.randn(1, 16, 512, generator=gen).bfloat16()
    for mode in ("1", "0"):  # the reference decode, and the Triton path selected
        os.environ["VLLM_ROCM_SPARSE_MLA_TORCH_DECODE"] = mode
        for where, text in (("nope", "K NoPE"), ("rope", "K RoPE")):
            swa, slots = _nan_cache(where)
            os.environ["VLLM_ROCM_SPARSE_MLA_VALIDATE"] = "1"
            try:
                decode(q, swa, [slots])
            except RuntimeError as e:
                assert text in str(e), f"validation raised for another reason: {e}"
            else:
                raise AssertionError(f"no error on a NaN in {where} with VALIDATE=1 (torch decode={mode})")
            finally:
                os.environ.pop("VLLM_ROCM_SPARSE_MLA_VALIDATE", None)
    # logits: a finite but huge query overflows the logits
    os.environ["VLLM_ROCM_SPARSE_MLA_TORCH_DECODE"] = "1"
    os.environ["VLLM_ROCM_SPARSE_MLA_VALIDATE"] = "1"
    try:
        swa, slots, _ = make_cache(2, 64, 30)
        qbig = torch.full((1, 16, 512), 3.0e38, dtype=torch.bfloat16)
        try:
            decode(qbig, swa, [slots])
        except RuntimeError as e:
            assert "logits" in str(e) or "probabilities" in str(e), str(e)
        else:
            raise AssertionError("no error on overflowing logits with VALIDATE=1")
        out = decode(q, swa, [slots])  # clean cache: no error
        assert torch.isfinite(out.float()).all()
    finally:
        os.environ.pop("VLLM_ROCM_SPARSE_MLA_VALIDATE", None)


def _triton_standin(result):
    """Stands in for the Triton decode (CPU): returns `result(q)`, counts its calls."""
    calls = []

    def fake(q, **kw):
        calls.append(1)
        return result(q)

    return fake, calls


@check
def validate_checks_triton_output():
    """Triton decode selected, VALIDATE=1: an output equal to float64 attention passes, one that is
    off by 3 % of the largest |K| in one element raises."""
    swa, swa_slots, _ = make_cache(3, 64, 120)
    b, h = 2, 16
    q = (torch.randn(b, h, 512, generator=gen) * 0.5).bfloat16()
    per_q = [swa_slots[:80], swa_slots[80:120]]
    k_rows = [naive.dequantize(swa, s) for s in per_q]
    want = ref_attention(q, k_rows, 0.05, None).bfloat16()
    kmax = max(float(k.abs().max()) for k in k_rows)
    wrong = want.clone()
    wrong[1, 3, 100] += 0.03 * kmax
    orig = m._rocm_sparse_attn_decode_triton
    os.environ["VLLM_ROCM_SPARSE_MLA_TORCH_DECODE"] = "0"
    os.environ["VLLM_ROCM_SPARSE_MLA_VALIDATE"] = "1"
    try:
        m._rocm_sparse_attn_decode_triton, _ = _triton_standin(lambda q: want.clone())
        out = decode(q, swa, per_q)
        assert torch.equal(out, want), "validation changed a correct Triton output"
        m._rocm_sparse_attn_decode_triton, _ = _triton_standin(lambda q: wrong.clone())
        try:
            decode(q, swa, per_q)
        except RuntimeError as e:
            assert "query 1" in str(e) and "reference" in str(e), f"raised for another reason: {e}"
        else:
            raise AssertionError("VALIDATE=1 let a Triton output 3 % of max |K| off the reference pass")
        nan_out = want.clone()
        nan_out[0, 5, 7] = float("nan")  # err > bound is False for NaN: the compare must still fire
        m._rocm_sparse_attn_decode_triton, _ = _triton_standin(lambda q: nan_out.clone())
        try:
            decode(q, swa, per_q)
        except RuntimeError as e:
            assert "query 0" in str(e) and "reference" in str(e), f"raised for another reason: {e}"
        else:
            raise AssertionError("VALIDATE=1 let a NaN in the Triton output pass the reference compare")
    finally:
        m._rocm_sparse_attn_decode_triton = orig
        os.environ.pop("VLLM_ROCM_SPARSE_MLA_VALIDATE", None)


@check
def validate_off_costs_nothing():
    """Validation off, Triton selected: the Triton output is passed through as it is, no host
    sync happens (no .tolist(), no bool() of a tensor), a NaN in the cache raises nothing."""
    os.environ.pop("VLLM_ROCM_SPARSE_MLA_VALIDATE", None)
    os.environ["VLLM_ROCM_SPARSE_MLA_TORCH_DECODE"] = "0"
    swa, slots = _nan_cache("nope")
    q = torch.randn(1, 16, 512, generator=gen).bfloat16()
    sentinel = torch.full((1, 16, 512), 0.375, dtype=torch.bfloat16)
    orig_triton = m._rocm_sparse_attn_decode_triton
    syncs = []
    orig_tolist, orig_bool = torch.Tensor.tolist, torch.Tensor.__bool__

    def tolist(self):
        syncs.append("tolist")
        return orig_tolist(self)

    def as_bool(self):
        syncs.append("bool")
        return orig_bool(self)

    m._rocm_sparse_attn_decode_triton, calls = _triton_standin(lambda q: sentinel.clone())
    try:
        torch.Tensor.tolist, torch.Tensor.__bool__ = tolist, as_bool
        out = decode(q, swa, [slots])
    finally:
        torch.Tensor.tolist, torch.Tensor.__bool__ = orig_tolist, orig_bool
        m._rocm_sparse_attn_decode_triton = orig_triton
    assert len(calls) == 1, "the Triton decode did not run"
    assert torch.equal(out, sentinel), "the output is not the Triton decode's"
    assert not syncs, f"host syncs with validation off: {syncs}"


NO_SPEC = types.SimpleNamespace(speculative_config=None)  # a vllm_config without speculative decoding
# v0.33.0's builders answer ALWAYS with adaptive verification on; v0.27.1's do not read it.
ADAPTIVE = types.SimpleNamespace(speculative_config=types.SimpleNamespace(enable_adaptive_verification=True))


def _builders():
    # vllm.models.deepseek_v4.amd.rocm may import vllm.platforms.rocm (v0.33.0 does), which needs an
    # amdsmi; the platform was resolved (CPU) when this script imported the module under test.
    import _fake_amdsmi

    _fake_amdsmi.install()
    import vllm.models.deepseek_v4.amd.rocm as dsv4_rocm

    builders = (dsv4_rocm.DeepseekV4ROCMAiterMLASparseMetadataBuilder,
                dsv4_rocm.DeepseekV4ROCMAiterSparseSWAMetadataBuilder)
    v41 = _v41_rocm()
    if v41 is not None:  # v0.33.0+: DeepSeek V4.1 has builders of its own
        builders += (v41.DeepseekV41ROCMAiterMLASparseMetadataBuilder,
                     v41.DeepseekV41ROCMAiterSparseSWAMetadataBuilder)
    return builders


def _v41_rocm():
    import importlib.util

    if importlib.util.find_spec("vllm.models.deepseek_v41") is None:
        return None
    import vllm.models.deepseek_v41.amd.rocm as v41

    return v41


@check
def host_sync_decode_disables_cudagraphs():
    """With the torch decode or validation on, both DSV4 ROCm metadata builders report no CUDA
    graph support (vLLM then runs that attention without full graphs); without, UNIFORM_BATCH."""
    from vllm.v1.attention.backend import AttentionCGSupport

    for env in ("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", "VLLM_ROCM_SPARSE_MLA_VALIDATE"):
        os.environ.pop("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", None)
        os.environ.pop("VLLM_ROCM_SPARSE_MLA_VALIDATE", None)
        builders = _builders()
        got = [b.get_cudagraph_support(NO_SPEC, None) for b in builders]
        assert got == [AttentionCGSupport.UNIFORM_BATCH] * len(builders), f"switches off: {got}"
        os.environ[env] = "1"
        try:
            got = [b.get_cudagraph_support(NO_SPEC, None) for b in builders]
            got_adaptive = [b.get_cudagraph_support(ADAPTIVE, None) for b in builders]
            assert got_adaptive == [AttentionCGSupport.NEVER] * len(builders), f"{env}=1, adaptive: {got_adaptive}"
        finally:
            os.environ.pop(env, None)
        assert got == [AttentionCGSupport.NEVER] * len(builders), f"{env}=1: {got}"


@check
def aiter_path_yields_to_the_switches():
    """v0.33.0+: the AITER sparse MLA kernel bypasses rocm_sparse_attn_decode, so with the torch
    decode or validation on, neither DeepSeek V4 nor V4.1 may choose it for decode (the switches
    would only turn CUDA graphs off); with both off, an enabled AITER kernel is still chosen. Where
    V4 has a prefill gate of its own (v0.34.0+), it does not read the switches."""
    from _harness import NotApplicable

    _builders()  # imports the model modules the way the builders' check does
    import vllm.models.deepseek_v4.amd.rocm as dsv4_rocm

    if not hasattr(dsv4_rocm, "_aiter_sparse_mla_enabled"):
        raise NotApplicable("this tree has no AITER sparse MLA path (_aiter_sparse_mla_enabled)")
    from vllm._aiter_ops import rocm_aiter_ops

    gates = {"V4 decode": getattr(dsv4_rocm, "_aiter_sparse_mla_decode_enabled", dsv4_rocm._aiter_sparse_mla_enabled)}
    v41 = _v41_rocm()
    if v41 is not None:
        gates["V4.1"] = v41._aiter_sparse_mla_enabled
    prefill = getattr(dsv4_rocm, "_aiter_sparse_mla_prefill_enabled", None)
    saved = rocm_aiter_ops.__dict__["is_triton_sparse_mla_enabled"]
    rocm_aiter_ops.is_triton_sparse_mla_enabled = lambda: True  # as on a gfx950 with AITER asked for
    try:
        for env in ("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", "VLLM_ROCM_SPARSE_MLA_VALIDATE"):
            os.environ.pop("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", None)
            os.environ.pop("VLLM_ROCM_SPARSE_MLA_VALIDATE", None)
            for name, gate in gates.items():
                assert gate(False), f"switches off: {name} does not choose the AITER kernel"
            os.environ[env] = "1"
            try:
                chosen = [name for name, gate in gates.items() if gate(False)]
                prefill_kept = prefill is None or prefill(64, False)
            finally:
                os.environ.pop(env, None)
            assert not chosen, f"{env}=1: {', '.join(chosen)} still chosen (the switch cannot act there)"
            assert prefill_kept, f"{env}=1: V4's AITER prefill gate reads the decode switches"
    finally:
        rocm_aiter_ops.is_triton_sparse_mla_enabled = saved


@check
def decode_refuses_capture():
    """Asked to run during a CUDA graph capture, the host-syncing decode raises a clear error
    (simulated capture on CPU; the GPU test captures for real)."""
    swa, swa_slots, _ = make_cache(2, 64, 40)
    q = torch.randn(1, 16, 512, generator=gen).bfloat16()
    orig = torch.cuda.is_current_stream_capturing, torch.cuda.is_available
    torch.cuda.is_current_stream_capturing = torch.cuda.is_available = lambda: True
    os.environ["VLLM_ROCM_SPARSE_MLA_TORCH_DECODE"] = "1"
    try:
        decode(q, swa, [swa_slots])
    except RuntimeError as e:
        assert "CUDA graph" in str(e), f"raised for another reason: {e}"
    else:
        raise AssertionError("the torch decode ran during a (simulated) CUDA graph capture")
    finally:
        torch.cuda.is_current_stream_capturing, torch.cuda.is_available = orig
        os.environ.pop("VLLM_ROCM_SPARSE_MLA_TORCH_DECODE", None)


report()
