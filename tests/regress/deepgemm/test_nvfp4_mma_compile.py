"""Compile level: the NVFP4 MMA builds only for sm_100a, and its SASS is the 4X block-scaled UMMA.

- test_raw_ptx_target_rule needs no DeepGEMM tree (raw inline PTX in kernels/nvfp4/mma_nvfp4_raw_probe.cu),
  so CI with nvcc guards the target rule (the seed's builds 17-22: wrong arch, then the wrong MMA kind).
- The other tests compile kernels/nvfp4/mma_nvfp4_probe.cu through the patched headers (tree from
  dsv4_tree("deepgemm"), CUTLASS via _cuda_tools.cutlass_include); they skip with the reason otherwise.
SASS mnemonics (nvcc 13.0, cuobjdump): cta_group::1 -> UTCOMMA.4X, cta_group::2 -> UTCOMMA.2CTA.4X;
kind::mxf8f6f4 (the wrong fallback) -> UTCQMMA; kind::mxf4 block32 -> UTCOMMA without .4X.
"""

from __future__ import annotations

import re
import subprocess

import pytest

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("dsv4_deepgemm_cuda_tools", Path(__file__).with_name("_cuda_tools.py"))
ct = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ct)

UMMA_4X = re.compile(r"\bUTCOMMA(?:\.2CTA)?\.4X\b")


def _mnemonics(sass: str) -> list[str]:
    return re.findall(r"\bUTC[A-Z0-9.]*MMA[A-Z0-9.]*", sass)


def test_raw_ptx_target_rule(tmp_path):
    ok = ct.compile_cubin(ct.RAW_PROBE, ct.GOOD_TARGET, tmp_path / "good.cubin")
    assert ok.returncode == 0, f"sm_100a must accept the NVFP4 MMA:\n{ok.stderr}"
    for target in ct.BAD_TARGETS:
        r = ct.compile_cubin(ct.RAW_PROBE, target, tmp_path / f"{target}.cubin")
        assert r.returncode != 0, f"{target} accepted kind::mxf4nvf4 scale_vec::4X; the target rule changed"
        assert "not supported on .target" in r.stderr, r.stderr
    sass = ct.sass(tmp_path / "good.cubin")
    found = _mnemonics(sass)
    assert "UTCOMMA.4X" in found and "UTCOMMA.2CTA.4X" in found, found
    assert "UTCQMMA" not in found, "kind::mxf8f6f4 (UE8M0 fallback) instruction in the NVFP4 probe"


def test_raw_ptx_family_target_names_scale_vec(tmp_path):
    # The precise reason sm_100f fails: the 4X scale vector is arch-specific (the seed's build 17 error)
    r = ct.compile_cubin(ct.RAW_PROBE, "sm_100f", tmp_path / "f.cubin")
    assert r.returncode != 0 and ".scale_vec::4X" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def patched(dsv4_tree):
    tree = dsv4_tree("deepgemm")
    return tree, [tree / "deep_gemm" / "include", ct.cutlass_include(tree)]


def test_patched_headers_sm100a_emit_4x_umma(patched, tmp_path):
    _, inc = patched
    r = ct.compile_cubin(ct.HEADER_PROBE, ct.GOOD_TARGET, tmp_path / "p.cubin", includes=inc)
    assert r.returncode == 0, r.stderr
    found = _mnemonics(ct.sass(tmp_path / "p.cubin"))
    assert sorted(found) == ["UTCOMMA.2CTA.4X", "UTCOMMA.4X"], found


def test_patched_headers_reject_wrong_targets(patched, tmp_path):
    _, inc = patched
    for target in ct.BAD_TARGETS:
        r = ct.compile_cubin(ct.HEADER_PROBE, target, tmp_path / f"{target}.cubin", includes=inc)
        assert r.returncode != 0, f"patched headers built the NVFP4 MMA for {target}"
        if target == "sm_100f":
            assert "JitArchTarget::Specific" in r.stderr, r.stderr  # the wrappers' static_assert
        else:
            assert "not supported on .target" in r.stderr, r.stderr


def test_pristine_headers_lack_nvfp4(dsv4_tree, tmp_path):
    base = dsv4_tree("deepgemm", patched=False)
    inc = [base / "deep_gemm" / "include", ct.cutlass_include(base)]
    r = ct.compile_cubin(ct.HEADER_PROBE, ct.GOOD_TARGET, tmp_path / "b.cubin", includes=inc)
    assert r.returncode != 0 and "NVFP4" in r.stderr


def _field(v: int, lo: int, width: int) -> int:
    return (v >> lo) & ((1 << width) - 1)


def test_nvfp4_instr_desc_bits(patched, tmp_path):
    """Host build of the probe prints the descriptors; decode them with the PTX-ISA bit table."""
    _, inc = patched
    exe = tmp_path / "probe_host"
    cmd = [ct.nvcc(), "-std=c++20", "-gencode", "arch=compute_100a,code=sm_100a", "-DDSV4_PROBE_HOST_MAIN",
           *[f"-I{i}" for i in inc], "-o", str(exe), str(ct.HEADER_PROBE)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert b.returncode == 0, b.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout
    descs = dict(line.split("=") for line in out.split())
    for key, m, n in (("desc_1cta", 128, 256), ("desc_2cta", 256, 256)):
        d = int(descs[key], 16)
        assert _field(d, 0, 3) == 0                  # dense
        assert _field(d, 4, 2) == 0                  # B scale-factor id (4X: always 0)
        assert _field(d, 7, 3) == 1 and _field(d, 10, 3) == 1  # A, B = E2M1 (MXF4 format)
        assert _field(d, 13, 2) == 0                 # no negate
        assert _field(d, 15, 2) == 0                 # both K-major
        assert _field(d, 17, 6) == n >> 3
        assert _field(d, 23, 1) == 0                 # scale format UE4M3 (1 would be UE8M0)
        assert _field(d, 24, 5) == m >> 4
        assert _field(d, 29, 2) == 0                 # A scale-factor id
        assert _field(d, 31, 1) == 0                 # dense K = 64


def test_mma_kind_is_not_mxfp8fp4(patched):
    tree, _ = patched
    types = (tree / "deep_gemm/include/deep_gemm/common/types.cuh").read_text()
    kinds = dict(re.findall(r"^\s*(\w+)\s*=\s*(\d+),", types.split("enum class MmaKind", 1)[1].split("};", 1)[0], re.M))
    assert kinds["NVFP4"] not in (kinds["BF16"], kinds["MXFP8FP4"])
    tc = (tree / "deep_gemm/include/deep_gemm/ptx/tcgen05.cuh").read_text()
    for group in (1, 2):
        assert f"tcgen05.mma.cta_group::{group}.kind::mxf4nvf4.block_scale.scale_vec::4X" in tc
    desc = (tree / "deep_gemm/include/deep_gemm/mma/sm100.cuh").read_text()
    body = desc.split("make_nvfp4_instr_desc()", 1)[1].split("}", 1)[0]
    assert "float_ue4m3_t" in body and "ue8m0" not in body
