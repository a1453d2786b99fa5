"""Subprocess probe: run the real `MQALayer.forward` / `DSparkAttention.forward` of one SGLang tree on
CPU and save what reaches wo_a / wo_b.

    python _o_fp8_qdq_probe.py OUT.npz        (env: the tree's python/ on PYTHONPATH, the switches)

What is real and what is stood in (the tests' docstrings repeat this):
- real: the tree's modules (`sglang.srt.models.deepseek_v4`, `..._dspark`, `sglang.srt.environ` and
  everything they import), imported from the tree with the wheel's pure-Python dependencies; the
  forward methods run unbound on a stand-in `self` (a SimpleNamespace holding the attributes the
  forward reads, the real `_kernel_num_heads` / `_local_attn_sink` bound to it); the real
  `_apply_wo_a_bf16_matmul` (its CPU einsum), DSpark's real torch inverse RoPE (`apply_rotary_emb`).
- stood in: the attention backend (returns a fixed o), `_forward_prepare` / q / kv projections (their
  outputs are not read on this path), `wo_b` (records its input), the pool, and MQALayer's CUDA-only
  `fused_rope_inplace` (replaced by the same inverse RoPE in torch). `flash_attn` and `torchvision`
  are not installed: a meta-path finder gives empty stub modules for those two names only, and only
  to imports made from sglang's own files (they are imported by unrelated multimodal code).
- added: a CPU kernel for the patched tree's custom op `sglang::dsv4_o_fp8_qdq_` (it has a kernel for
  the GPU's dispatch key only, and the QDQ module refuses CPU tensors): the module's check of the
  block, then the tree's o_fp8_qdq_reference, as in the patch's wiring test (`register_cpu_kernel`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

import numpy as np
import torch

STUBBED = ("flash_attn", "torchvision")


class _StubModule(types.ModuleType):
    """Any attribute is another stub; calling one returns a stub. Only for STUBBED names."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        m = _StubModule(f"{self.__name__}.{name}")
        m.__path__ = []
        return m

    def __call__(self, *a, **k):
        return _StubModule(f"{self.__name__}()")

    def __mro_entries__(self, bases):
        return (object,)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in STUBBED:
            return None
        f = sys._getframe(1)
        while f is not None and ("importlib" in f.f_code.co_filename or f.f_code.co_filename.startswith("<frozen")):
            f = f.f_back
        if f is None or f"{os.sep}sglang{os.sep}" not in f.f_code.co_filename:
            return None  # third-party availability probes see the module as absent
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None  # really installed: use it
            except Exception:
                pass
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def register_cpu_kernel(dv4) -> torch.library.Library | None:
    """The patched tree's layers call the o FP8 QDQ through the custom op sglang::dsv4_o_fp8_qdq_,
    which has a kernel for the GPU's dispatch key only, and o_fp8_qdq_ refuses CPU tensors. As in the
    patch's wiring test, the tree's reference (sglang.test.kernels) is registered as the op's CPU
    kernel, after the QDQ module's own check of the block (o_fp8_qdq_'s first check on a GPU), so the
    CPU forwards here reach the op through the dispatcher. Nothing on the pin (no op). Keep the
    returned library alive."""
    if not hasattr(dv4, "dsv4_o_fp8_qdq_"):
        return None
    from sglang.kernels.ops.quantization.o_fp8_qdq import check_o_fp8_qdq_block
    from sglang.test.kernels.deepseek_v4.o_fp8_qdq_reference import o_fp8_qdq_reference

    def cpu_kernel(o: torch.Tensor, block: int) -> None:
        check_o_fp8_qdq_block(block, o.shape[-1])
        o.copy_(o_fp8_qdq_reference(o, block))

    lib = torch.library.Library("sglang", "IMPL")
    lib.impl("dsv4_o_fp8_qdq_", cpu_kernel, "CPU")
    return lib


def inverse_rope_(x: torch.Tensor, freqs: torch.Tensor) -> None:
    """x [T, H, rd] (interleaved pairs) *= conj(freqs) [T, rd/2], in place, computed in fp32."""
    xc = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    x.copy_(torch.view_as_real(xc * freqs.conj()[:, None, :]).flatten(-2))


def make_o(T: int, H: int, hd: int, gen: torch.Generator) -> torch.Tensor:
    """Random bf16 attention output with per-32 block magnitudes spread over 2^-30..2^20, plus an
    all-zero, a tiny (amax < 1e-4), a huge (448*2^k) and a mixed-sign block in the NoPE part."""
    o = torch.randn(T, H, hd, generator=gen)
    mag = torch.exp2(torch.randint(-30, 21, (T, H, hd // 32, 1), generator=gen).float())
    o = (o.view(T, H, hd // 32, 32) * mag).view(T, H, hd)
    o[0, 0, :32] = 0.0
    o[0, 1, :32] = torch.randn(32, generator=gen) * 1e-6
    o[0, 2, :32] = torch.randn(32, generator=gen) * 2.0**12
    o[0, 2, 5] = 448.0 * 2.0**12
    o[min(1, T - 1), 3, :32] = torch.where(torch.arange(32) % 2 == 0, 1.0, -1.0) * 3.0
    return o.to(torch.bfloat16)


def main(out_path: str) -> None:
    sys.meta_path.append(_StubFinder())
    import sglang.srt.models.deepseek_v4 as dv4
    import sglang.srt.models.deepseek_v4_dspark as dsp
    from sglang.srt.model_executor import forward_context
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    cpu_kernel = register_cpu_kernel(dv4)  # noqa: F841 (kept alive for the forwards below)
    T, H, hd, rd, G = 5, 8, 128, 64, 2
    D = H * hd // G
    gen = torch.Generator().manual_seed(int(os.environ.get("PROBE_SEED", "0")))
    o_attn = make_o(T, H, hd, gen)
    positions = torch.arange(T) * 7 + 3
    angles = torch.rand(64, rd // 2, generator=gen) * 6.283
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    eye = torch.eye(D, dtype=torch.bfloat16).repeat(G, 1)  # wo_a [G*R, D], R = D: identity per group

    o_roped = o_attn.clone()
    inverse_rope_(o_roped[..., -rd:], freqs_cis[positions])

    results: dict[str, np.ndarray] = {
        "o_attn": o_attn.view(torch.int16).numpy().view(np.uint16),
        "o_roped": o_roped.view(torch.int16).numpy().view(np.uint16),
    }
    calls = {"fused_rope_wo_a": 0}

    class Backend:
        def forward(self, q, k, v, layer, forward_batch, compress_ratio, attn_sink, save_kv_cache, **kw):
            return o_attn.clone()

    backend = Backend()

    def fake_fused_rope_inplace(x, y, freqs, positions, inverse=False):
        assert y is None and inverse
        inverse_rope_(x, freqs[positions])

    def fake_fused_rope_wo_a_bf16(o, wo_a, freqs_real, positions, out_mxfp8=False):
        calls["fused_rope_wo_a"] += 1
        o = o.clone()
        inverse_rope_(o.view(o.shape[0], H, hd)[..., -rd:], freqs_cis[positions])
        return (torch.einsum("tgd,grd->tgr", o, wo_a),)

    dv4.get_attn_tp_context = lambda: types.SimpleNamespace(input_scattered=False)
    dv4.get_attn_backend = lambda: backend
    dv4.fused_rope_inplace = fake_fused_rope_inplace
    dv4.fused_rope_wo_a_bf16 = fake_fused_rope_wo_a_bf16
    dv4.get_forward = lambda: types.SimpleNamespace(sp_active=False)
    forward_context.get_attn_backend = lambda: backend
    dsp._resolve_dspark_pool = lambda: types.SimpleNamespace(uniform_fp8=False)

    fb = types.SimpleNamespace(forward_mode=ForwardMode.DECODE)
    x = torch.randn(T, 64, generator=gen).to(torch.bfloat16)

    def mqa_self(use_fused_wo_a: bool):
        captured = {}
        s = types.SimpleNamespace(
            alt_streams=None,
            compress_ratio=4,
            use_mega_attention=False,
            is_dsv41=False,
            q_head_norm=False,
            n_local_heads=H,
            head_dim=hd,
            attn_tp_size=1,
            attn_sink=torch.zeros(H),
            layer_id=0,
            attn_mqa=object(),
            wo_a_fp8=False,
            use_npu_arch35_mxfp8_wo_a=False,
            use_flashinfer_mxfp8_wo_b=False,
            use_fused_wo_a=use_fused_wo_a,
            qk_rope_head_dim=rd,
            freqs_cis=freqs_cis,
            n_local_groups=G,
            o_lora_rank=D,
            wo_a=types.SimpleNamespace(weight=eye),
        )
        s._kernel_num_heads = types.MethodType(dv4.MqaAttentionBase._kernel_num_heads, s)
        s._local_attn_sink = types.MethodType(dv4.MqaAttentionBase._local_attn_sink, s)
        s._forward_prepare = lambda *a, **k: (torch.zeros(T, H, hd, dtype=torch.bfloat16), None)

        def project_wo_b(o, defer_all_reduce=False):
            captured["wo_b_in"] = o
            return o.flatten(1)

        s._project_wo_b = project_wo_b
        return s, captured

    for name, fused in (("mqa", False), ("mqa_fused", True)):
        s, cap = mqa_self(fused)
        before = calls["fused_rope_wo_a"]
        dv4.MQALayer.forward(s, x, positions, fb)
        results[name] = cap["wo_b_in"].contiguous().view(torch.int16).numpy().view(np.uint16)
        results[name + "_fused_calls"] = np.array(calls["fused_rope_wo_a"] - before)

    # DSparkAttention.forward
    cap = {}
    s = types.SimpleNamespace(
        rope_head_dim=rd,
        alt_streams=None,
        q_head_norm=False,
        n_local_heads=H,
        head_dim=hd,
        attn=object(),
        _use_fast_kernel=False,
        freqs_cis=freqs_cis,
        n_local_groups=G,
        o_lora_rank=D,
        attn_tp_size=1,
        wo_a=types.SimpleNamespace(weight=eye),
        kv_proj_only=lambda h: torch.zeros(T, hd, dtype=torch.bfloat16),
        _store_block_kv=lambda **k: None,
        _compute_q=lambda h, p, q_out=None: q_out,
        _local_attn_sink=lambda: torch.zeros(H),
    )

    def wo_b(value, skip_all_reduce=False):
        cap["wo_b_in"] = value
        return value, None

    s.wo_b = wo_b
    dsp.DSparkAttention.forward(s, positions, x, fb)
    results["dspark"] = cap["wo_b_in"].contiguous().view(torch.int16).numpy().view(np.uint16)
    results["has_switch"] = np.array(hasattr(dv4.envs, "SGLANG_DSV4_O_FP8_QDQ_BLOCK"))
    np.savez(out_path, **results)


if __name__ == "__main__":
    main(sys.argv[1])
