"""Subprocess probe: how one SGLang tree's deepseek_v4 treats the o FP8 QDQ switch when a layer is
built, and what a bad value does in forward.

    python _o_fp8_qdq_init_probe.py OUT.json     (env: the tree's python/ on PYTHONPATH)

Each case sets the module's switch (`_O_FP8_QDQ_BLOCK`, what deepseek_v4 read from
SGLANG_DSV4_O_FP8_QDQ_BLOCK at import) and the platform flags, then runs what `MQALayer.__init__` /
`DSparkAttention.__init__` run for the switch (`_init_o_fp8_qdq(self, _o_fp8_qdq_ignored_by(self))`)
on a stand-in layer of the DeepSeek-V4 Flash shape (64 heads x 512 in 8 groups: D = 4096). Real
layers are not built: that needs SGLang's distributed and model-runner state. Recorded per case: the
exception (type and message) or "ok", and the warnings logged. On a tree without the patch each case
records "missing: ..." instead.
"""

from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _o_fp8_qdq_probe import _StubFinder, register_cpu_kernel  # noqa: E402


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def layer(**kw):
    base = dict(n_heads=64, head_dim=512, n_groups=8, use_mega_attention=False, wo_a_fp8=False,
                use_npu_arch35_mxfp8_wo_a=False,
                wo_a=types.SimpleNamespace(weight=torch.zeros(1, dtype=torch.bfloat16)))
    base.update(kw)
    return types.SimpleNamespace(**base)


# name -> (block, platform patches, stand-in layer attributes). Every case sets all four platform
# flags (this machine has no GPU, so the module read _is_cuda as False).
NOT_CUDA = {"_is_cuda": False, "_is_hip": False, "_is_npu": False, "_is_xpu": False}
CUDA = {**NOT_CUDA, "_is_cuda": True}
ROCM = {**NOT_CUDA, "_is_hip": True}
NPU = {**NOT_CUDA, "_is_npu": True}
CASES = {
    "cuda_bf16": (32, CUDA, {}),
    "off_on_rocm": (0, ROCM, {}),
    "negative": (-32, CUDA, {}),
    "not_power_of_two": (48, CUDA, {}),
    "does_not_divide_d": (8192, CUDA, {}),
    "rocm_bf16": (32, ROCM, {}),
    "npu_bf16": (32, NPU, {}),
    "xpu_bf16": (32, {**NOT_CUDA, "_is_xpu": True}, {}),
    "cpu_bf16": (32, NOT_CUDA, {}),
    "mega": (32, CUDA, {"use_mega_attention": True}),
    "fp8_wo_a": (32, CUDA, {"wo_a_fp8": True}),
    "rocm_mxscale": (32, {**ROCM, "_wo_a_fp8_mxscale": object()}, {"wo_a_fp8": True}),
    "npu_mxfp8": (32, NPU, {"use_npu_arch35_mxfp8_wo_a": True}),
    "gguf": (32, CUDA, {"wo_a": types.SimpleNamespace(qweight=None)}),
    "mega_again": (32, CUDA, {"use_mega_attention": True}),  # the warning is logged once
}


def run_case(dv4, block, platform, attrs, records) -> dict:
    before = len(records.messages)
    with mock.patch.object(dv4, "_O_FP8_QDQ_BLOCK", block, create=True), \
            mock.patch.multiple(dv4, **platform):
        try:
            init, ignored_by = dv4._init_o_fp8_qdq, dv4._o_fp8_qdq_ignored_by
        except AttributeError as e:
            return {"result": f"missing: {e}", "warnings": []}
        s = layer(**attrs)
        try:
            init(s, ignored_by(s))
            result = "ok"
        except Exception as e:  # recorded for the test to judge
            result = f"{type(e).__name__}: {e}"
    return {"result": result, "warnings": records.messages[before:]}


def forward_with(dv4, block) -> str:
    """What the wo_a-side hook does with `block` set (no layer check in between)."""
    o = torch.ones(2, 8, 64, dtype=torch.bfloat16)
    with mock.patch.object(dv4, "_O_FP8_QDQ_BLOCK", block, create=True):
        hook = getattr(dv4, "_maybe_o_fp8_qdq_", None)
        if hook is None:
            return "missing"
        try:
            hook(o)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    return "ok"


def main(out_path: str) -> None:
    sys.meta_path.append(_StubFinder())
    import sglang.srt.models.deepseek_v4 as dv4

    cpu_kernel = register_cpu_kernel(dv4)  # noqa: F841 (forward_with runs the op on CPU)
    records = _Records()
    logging.getLogger().addHandler(records)
    out = {name: run_case(dv4, *case, records) for name, case in CASES.items()}
    out["forward_negative"] = forward_with(dv4, -32)
    out["import_value"] = getattr(dv4, "_O_FP8_QDQ_BLOCK", None)
    Path(out_path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
