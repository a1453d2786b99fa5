"""vllm 4: the skinny-GEMM gate's decisions, with the real vllm.platforms.rocm and
rocm_unquantized_gemm_impl; the GCN arch comes from a stand-in amdsmi, the skinny ops are recorders.
Also runs the patched tree's tests/model_executor/layers/test_rocm_unquantized_gemm.py in this venv."""

from __future__ import annotations

import json
import logging
import os

import torch

import _fake_amdsmi
from _harness import check, report, run_tree_tests

_fake_amdsmi.install()  # before vLLM resolves its platform: these checks run as ROCm

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

# arch -> skinny GEMM used for VLLM_ROCM_USE_SKINNY_GEMM (unset, "0", "1"). The kernels are compiled
# for gfx90a/gfx942/gfx950 and gfx11/gfx12 but gfx1250 (csrc/rocm/skinny_gemms.cu); elsewhere they
# are stubs that assert on the device, whatever the variable says.
EXPECTED = {
    "gfx90a": (True, False, True), "gfx942": (True, False, True), "gfx950": (True, False, True),
    "gfx1100": (True, False, True), "gfx1201": (True, False, True),
    "gfx906": (False, False, False), "gfx908": (False, False, False), "gfx1030": (False, False, False),
    "gfx936": (False, False, False), "gfx938": (False, False, False), "gfx1250": (False, False, False),
}


def set_arch(arch: str, widen_gfx9: bool = False) -> None:
    rocm = _fake_amdsmi.set_arch(arch)
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
def ignored_value_logged_once():
    records = []

    class H(logging.Handler):
        def emit(self, r):
            records.append(r.getMessage())

    logging.getLogger("vllm").addHandler(H())
    set_arch("gfx936", widen_gfx9=True)  # first: the log is once per process
    used = [skinny_used("1") for _ in range(3)]
    assert not any(used), "VLLM_ROCM_USE_SKINNY_GEMM=1 dispatched the stub kernels on gfx936"
    hits = [r for r in records if "VLLM_ROCM_USE_SKINNY_GEMM" in r]
    assert len(hits) == 1 and "ignored" in hits[0], hits


@check
def decision_table():
    got, wrong = {}, {}
    for widen in (False, True):
        for arch, want in EXPECTED.items():
            if widen and arch not in ("gfx936", "gfx938"):
                continue
            set_arch(arch, widen_gfx9=widen)
            key = arch + (" (on_gfx9 widened)" if widen else "")
            got[key] = tuple(skinny_used(env) for env in (None, "0", "1"))
            if got[key] != want:
                wrong[key] = (got[key], want)
    assert not wrong, "arch: (got, expected) for (unset, 0, 1): " + json.dumps(wrong)


@check
def widened_gfx9_stays_off_on_dcu():
    for arch in ("gfx936", "gfx938"):
        set_arch(arch, widen_gfx9=True)
        assert not skinny_used(None), f"{arch} with on_gfx9() widened: skinny GEMM used by default"
        assert not skinny_used("0"), f"{arch}: skinny GEMM used with VLLM_ROCM_USE_SKINNY_GEMM=0"


@check
def upstream_gemm_tests():
    """The patched tree's test_rocm_unquantized_gemm.py (upstream's tests as the patch leaves them,
    plus the ones it adds), run here with pytest; pytest comes from the runner's environment."""
    set_arch("gfx942")
    U.ops = __import__("vllm._custom_ops", fromlist=["ops"])  # the tests put their own mocks in
    # *_real_kernel tests (v0.33.0) run the compiled ops on a ROCm GPU: not on this CPU.
    run_tree_tests(os.environ["DSV4_TREE_VLLM"], "tests/model_executor/layers/test_rocm_unquantized_gemm.py", "-k", "not real_kernel")


report()
