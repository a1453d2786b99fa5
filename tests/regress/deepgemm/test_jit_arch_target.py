"""Patch "Compile arch-specific kernels for sm_100a, keep sm_100f for the rest".

select_arch() lives in a header free of CUDA/PyTorch (csrc/jit/arch_target.hpp), so it is compiled with the
host C++ compiler and run over the whole table. Needs the patched tree (dsv4_tree, skips when unreachable)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

# (major, minor, compiler supports families, target, number_only) -> arch suffix
TABLE = [
    (10, 0, True, "Family", False, "100f"),     # upstream default on NVCC/NVRTC >= 12.9: unchanged
    (10, 0, False, "Family", False, "100a"),    # old compilers: unchanged
    (10, 0, True, "Specific", False, "100a"),   # the NVFP4 MMA: must be sm_100a, never sm_100f
    (10, 0, False, "Specific", False, "100a"),
    (10, 3, True, "Family", False, "100f"),
    (10, 3, True, "Specific", False, "103a"),   # exact device, not sm_100a (would not load on SM103)
    (10, 1, True, "Family", False, "101a"),
    (9, 0, True, "Family", False, "90a"),
    (9, 0, True, "Specific", False, "90a"),
    (12, 0, True, "Specific", False, "120a"),
    (10, 0, True, "Family", True, "100"),
    (10, 0, True, "Specific", True, "100"),
    (9, 0, False, "Family", True, "90"),
]


def _cxx():
    cxx = shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no host C++ compiler (g++/clang++)")
    return cxx


def test_select_arch_table(dsv4_tree, tmp_path):
    tree = dsv4_tree("deepgemm")
    lines = "\n".join(
        f'    std::printf("%s\\n", deep_gemm::select_arch({ma}, {mi}, {str(no).lower()}, {str(fam).lower()}, '
        f'deep_gemm::JitArchTarget::{tgt}).c_str());'
        for ma, mi, fam, tgt, no, _ in TABLE)
    src = tmp_path / "arch.cpp"
    src.write_text(f'#include <cstdio>\n#include "jit/arch_target.hpp"\nint main() {{\n{lines}\n'
                   '    std::printf("%s %s\\n", deep_gemm::to_string(deep_gemm::JitArchTarget::Family),\n'
                   '                deep_gemm::to_string(deep_gemm::JitArchTarget::Specific));\n}\n')
    exe = tmp_path / "arch"
    b = subprocess.run([_cxx(), "-std=c++17", "-Wall", "-Werror", "-Wno-unused-function", f"-I{tree / 'csrc'}",
                        str(src), "-o", str(exe)], capture_output=True, text=True, timeout=120)
    assert b.returncode == 0, b.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout.split("\n")
    assert out[: len(TABLE)] == [row[-1] for row in TABLE]
    assert out[len(TABLE)] == "arch-family arch-specific"


def test_both_jit_paths_take_the_per_kernel_target(dsv4_tree):
    """Source guard: no compiler bakes --gpu-architecture into the shared flags; NVCC (cubin and PTX) and
    NVRTC both append the per-kernel arch flags, which are part of the cache key and printed in debug."""
    src = (dsv4_tree("deepgemm") / "csrc/jit/compiler.hpp").read_text()
    nvcc = src.split("class NVCCCompiler", 1)[1].split("class NVRTCCompiler", 1)[0]
    nvrtc = src.split("class NVRTCCompiler", 1)[1]
    for body in (nvcc, nvrtc):
        ctor_flags = re.findall(r"flags = fmt::format\((.*?)\);", body, re.S)
        assert ctor_flags and all("--gpu-architecture" not in f for f in ctor_flags)
        assert "support_arch_family =" in body
    assert nvcc.count("flags, arch_flags") == 2          # -cubin and -ptx commands
    assert 'fmt::format("{} {}", flags, arch_flags)' in nvrtc
    base = src.split("class NVCCCompiler", 1)[0]
    assert "const JitArchTarget& target = JitArchTarget::Family" in base
    assert re.search(r"kernel_signature = fmt::format\([^;]*arch_flags", base)
    assert "JIT arch target for" in base


def test_pristine_get_arch_is_family_only(dsv4_tree):
    """The bug, at the pin: get_arch() has no per-kernel choice and returns 100f whenever families exist."""
    src = (dsv4_tree("deepgemm", patched=False) / "csrc/jit/device_runtime.hpp").read_text()
    assert 'return support_arch_family ? "100f" : "100a";' in src
    assert "JitArchTarget" not in src
