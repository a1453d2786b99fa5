"""vllm 2 at v0.33.0: ../../checks/e4m3_manual_decode.py unchanged (imported: its sub-checks run
first, same TRITON_INTERPRET=1 setup, FP8 casts made to fail as on gfx936), plus two sub-checks for
what v0.33.0 changed around the kernel: the launcher's non-gfx942/gfx950 branch (gfx936's path)
runs without FP8 casts on gfx936, and hands back inverse-RoPE'd rows when given positions, because
rocm_sparse_attn_decode reports every row as rotated then."""

from __future__ import annotations

import inspect
import textwrap

import torch

import e4m3_manual_decode as base  # noqa: F401  (runs the shared sub-checks)
from _harness import check, report
from e4m3_manual_decode import FP8_BLOCKED, gen, m
from kernels.fp8_ds_mla import naive

# The launcher asserts its tensors are on a device; the interpreter runs them on the CPU. Rebuild it
# from its own source with only that assert removed (everything else is the module's code).
_src = textwrap.dedent(inspect.getsource(m._rocm_sparse_attn_decode_ragged_triton))
_cut = _src.index("    assert (\n        not q.is_cpu")
_end = _src.index(")\n", _cut) + 2
_ns: dict = {}
exec(compile(_src[:_cut] + _src[_end:], m.__file__, "exec"), m.__dict__, _ns)
launch = _ns["_rocm_sparse_attn_decode_ragged_triton"]

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
    return launch(q=q, main_cache=cache, main_indices=slots, main_indptr=indptr, scale=0.05,
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
    cache, slots, indptr, q, sink, pos, cos_sin = _inputs()
    plain = _run(cache, slots, indptr, q, sink)
    rotated = _run(cache, slots, indptr, q, sink, inv_rope_positions=pos, inv_rope_cos_sin_cache=cos_sin)
    assert not torch.equal(rotated, plain), "rows came back not rotated though positions were passed"
    want = _inverse_rope(plain, pos, cos_sin)
    assert torch.equal(rotated[..., :448], plain[..., :448]), "NoPE lanes changed"
    err = (rotated.double() - want.double()).abs().max().item()
    assert err <= 2.0**-7 * want.double().abs().max().item(), f"inverse RoPE off: max_abs {err}"


report()
