"""vllm 4: the skinny-GEMM gate's decisions, with the real vllm.platforms.rocm and
rocm_unquantized_gemm_impl; the GCN arch comes from a stand-in amdsmi, the skinny ops are recorders."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import types

import torch

from _harness import check, report

ARCH = {"name": "gfx942"}
fake = types.ModuleType("amdsmi")
fake.AmdSmiException = type("AmdSmiException", (Exception,), {})
fake.AmdSmiMemoryType = types.SimpleNamespace(VRAM=0)
fake.amdsmi_init = lambda *a, **k: None
fake.amdsmi_shut_down = lambda *a, **k: None
fake.amdsmi_get_processor_handles = lambda: [object()]
fake.amdsmi_get_gpu_asic_info = lambda h: {"target_graphics_version": ARCH["name"]}
for _n in ("amdsmi_get_gpu_device_uuid", "amdsmi_get_gpu_memory_total", "amdsmi_topo_get_link_type",
           "amdsmi_topo_get_numa_node_number"):
    setattr(fake, _n, lambda *a, **k: None)
sys.modules["amdsmi"] = fake

import vllm.platforms.rocm as rocm  # noqa: E402
import vllm.model_executor.layers.utils as U  # noqa: E402

CALLS: list[str] = []


class RecordingOps:
    def _rec(self, name, m_rows, x):
        CALLS.append(name)
        return torch.zeros(x.shape[0], m_rows, dtype=x.dtype)

    def wvSplitK(self, w, x, cu, bias):
        return self._rec("wvSplitK", w.shape[0], x)

    def LLMM1(self, w, x, n):
        return self._rec("LLMM1", w.shape[0], x)

    def wvSplitKrc(self, x, w, cu, bias):
        return self._rec("wvSplitKrc", w.shape[0], x)


U.ops = RecordingOps()
U.num_compute_units = lambda: 304

ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx936", "gfx938", "gfx1100")
EXPECTED = {  # arch -> (unset, "0", "1")
    "gfx90a": (True, False, True), "gfx942": (True, False, True), "gfx950": (True, False, True),
    "gfx1100": (True, False, True),
    "gfx936": (False, False, True), "gfx938": (False, False, True),
}


def set_arch(arch: str, widen_gfx9: bool = False) -> None:
    ARCH["name"] = arch
    importlib.reload(rocm)
    if widen_gfx9:  # what DCU forks do: on_gfx9() also for gfx936/gfx938
        rocm._ON_GFX9 = True


def skinny_used(env: str | None) -> bool:
    if env is None:
        os.environ.pop("VLLM_ROCM_USE_SKINNY_GEMM", None)
    else:
        os.environ["VLLM_ROCM_USE_SKINNY_GEMM"] = env
    CALLS.clear()
    x = torch.randn(2, 256).bfloat16()
    w = torch.randn(64, 256).bfloat16()
    U.rocm_unquantized_gemm_impl(x, w, None)
    return bool(CALLS)


@check
def explicit_value_logged_once():
    records = []

    class H(logging.Handler):
        def emit(self, r):
            records.append(r.getMessage())

    logging.getLogger("vllm").addHandler(H())
    set_arch("gfx936")  # first: the log is once per process
    for _ in range(3):
        assert skinny_used("1")
    hits = [r for r in records if "VLLM_ROCM_USE_SKINNY_GEMM" in r]
    assert len(hits) == 1, hits


@check
def decision_table():
    got = {}
    for arch in ARCHS:
        set_arch(arch)
        got[arch] = tuple(skinny_used(env) for env in (None, "0", "1"))
    wrong = {a: (got[a], EXPECTED[a]) for a in ARCHS if got[a] != EXPECTED[a]}
    assert not wrong, "arch: (got, expected) for (unset, 0, 1): " + json.dumps(wrong)


@check
def widened_gfx9_stays_off_on_dcu():
    for arch in ("gfx936", "gfx938"):
        set_arch(arch, widen_gfx9=True)
        assert not skinny_used(None), f"{arch} with on_gfx9() widened: skinny GEMM used by default"
        assert not skinny_used("0"), f"{arch}: skinny GEMM used with VLLM_ROCM_USE_SKINNY_GEMM=0"


report()
