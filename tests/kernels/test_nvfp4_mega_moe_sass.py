"""Compile level: the vendored NVFP4 MegaMoE kernels (`impls/sm100_nvfp4_mega_moe.cuh`, the one the DeepSeek V4
patch wires, and `impls/sm100_fp4_fp4_mega_moe.cuh`; the DeepGEMM tree the deepgemm stack builds: vLLM's vendored
2.8.1) instantiated at DeepSeek V4 Pro's shapes, compiled for the family target `sm_100f` as DeepGEMM's JIT
does, and their SASS read for the block-16 NVFP4 MMA.

- DSV4 Pro: hidden 7168, intermediate 3072, 384 routed experts, top-6; expert parallelism over 8 ranks
  (48 local experts), 148 SMs (B200); SwiGLU clamp 10; routed only (its FP8 shared expert cannot be fused
  by `fp4_fp4_mega_moe`, which fuses BF16 shared experts only) and with one fused BF16 shared expert of
  the same width (the dequantize-to-BF16 option).
- The instantiation has the form the JIT writes (`static void __instantiate_kernel() { auto ptr =
  &sm100_fp4_fp4_mega_moe_impl<...>; }`, template arguments in the order of the header); the tile
  configuration (BLOCK_M 128, BLOCK_N 128, BLOCK_K 256, STORE_BLOCK_M 32, 6 stages, 128 dispatch + 128
  MMA + 256 epilogue threads, 512 bytes per pull) is ours, chosen to meet the header's static asserts
  (the JIT's heuristics are host code the vendored tree does not carry); the compile flags are the ones
  the JIT passes (read from the vendored extension).
- The SASS must hold the 2-CTA block-16 MMA (`UTCOMMA.2CTA.4X`), no local memory; with the shared
  expert also the BF16 MMA (`UTCHMMA`).
- The field report's failure, on the real kernel: the same headers with the `.block16` spelling replaced
  by `scale_vec::4X` are refused on `sm_100f` and accepted on `sm_100a` with the same MMA.

The tree comes through the tool (`dsv4_tree("deepgemm")`, from the vLLM wheel); nothing upstream is
committed. Skips with the reason where nvcc >= 12.9, cuobjdump or nvdisasm are missing (see
test_nvfp4_ptx_rule.py) or the wheel cannot be had."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_nvfp4_ptx_rule import _cuobjdump, _nvcc

DSV4_PRO = dict(hidden=7168, intermediate=3072, experts=384, topk=6)
RANKS, SMS = 8, 148
# the JIT's own flags (deep_jit: -std=c++{20}, --expt-relaxed-constexpr, --expt-extended-lambda, ...)
FLAGS = ["-std=c++20", "--expt-relaxed-constexpr", "--expt-extended-lambda",
         "--diag-suppress=39,161,174,177,186,940", "-cubin"]
HEADER = "deep_gemm/impls/sm100_fp4_fp4_mega_moe.cuh"


def instantiation(shared_experts: int, clamp: float = 10.0) -> str:
    args = [256,                                          # kNumMaxTokensPerRank
            DSV4_PRO["hidden"], DSV4_PRO["intermediate"],
            DSV4_PRO["experts"], shared_experts,
            DSV4_PRO["topk"],
            128, 128, 256,                                # BLOCK_M, BLOCK_N, BLOCK_K
            32,                                           # STORE_BLOCK_M
            128, 128,                                     # SF_BLOCK_M, SF_BLOCK_N
            1024, 1024,                                   # ring tokens, SF ring tokens
            6,                                            # stages
            512,                                          # bytes per pull
            128, 128, 256,                                # dispatch, MMA, epilogue threads
            SMS, RANKS,
            f"{clamp}f", "true", "false", "false"]        # clamp, fast math, post-expert norm, TRT-LLM layout
    return (f"#include <{HEADER}>\nusing namespace deep_gemm;\nstatic void __instantiate_kernel() {{\n"
            f"    auto ptr = reinterpret_cast<void*>(&sm100_fp4_fp4_mega_moe_impl<\n        "
            + ",\n        ".join(map(str, args)) + "\n    >);\n}\n")


@pytest.fixture(scope="module")
def tree(dsv4_tree) -> Path:
    t = dsv4_tree("deepgemm")
    if not (t / "deep_gemm/include" / HEADER).is_file():
        pytest.fail(f"{t}: the deepgemm tree has no {HEADER} (the pin is vLLM's vendored 2.8.1, which has it)")
    return t


def compile_(tree: Path, src: str, target: str, tmp: Path, includes: list[Path] = ()) -> tuple[subprocess.CompletedProcess, Path]:
    cu = tmp / f"probe_{target}.cu"
    cu.write_text(src)
    cubin = cu.with_suffix(".cubin")
    inc = [*includes, tree / "deep_gemm/include", tree / "third-party/cutlass/include"]
    r = subprocess.run([_nvcc(), *FLAGS, f"-arch={target}", *(f"-I{p}" for p in inc), "-o", str(cubin), str(cu)],
                       capture_output=True, text=True, timeout=600)
    return r, cubin


def sass(cubin: Path) -> tuple[str, str]:
    exe, env = _cuobjdump()
    out = subprocess.run([exe, "--dump-sass", str(cubin)], capture_output=True, text=True, env=env, timeout=300)
    res = subprocess.run([exe, "--dump-resource-usage", str(cubin)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and res.returncode == 0, out.stderr + res.stderr
    return out.stdout, res.stdout


def mmas(text: str) -> set[str]:
    return set(re.findall(r"\bUTC[A-Z0-9.]*MMA[A-Z0-9.]*", text))


@pytest.mark.parametrize("shared_experts", [0, 1], ids=["routed-only", "fused-bf16-shared"])
def test_dsv4_pro_instantiation_compiles_for_sm_100f_with_the_block16_mma(tree, tmp_path, shared_experts):
    _nvcc(), _cuobjdump()  # skip early, with the reason, where the tools are missing
    r, cubin = compile_(tree, instantiation(shared_experts), "sm_100f", tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    text, usage = sass(cubin)
    # the kernel really is the DSV4 Pro instance: its mangled name carries the shapes
    assert re.search(r"sm100_fp4_fp4_mega_moe_implILj256ELj7168ELj3072ELj384ELj%dELj6E" % shared_experts, text)
    found = mmas(text)
    assert "UTCOMMA.2CTA.4X" in found, found  # kind::mxf4nvf4, block 16, two CTAs
    assert not any(m.startswith("UTCQMMA") for m in found), found  # no MXF8F6F4 (the field's garbled path)
    assert ("UTCHMMA.2CTA" in found) == bool(shared_experts), found  # BF16 shared expert only when fused
    assert re.search(r"\bLOCAL:0\b", usage), usage


NVFP4_HEADER = "deep_gemm/impls/sm100_nvfp4_mega_moe.cuh"


def nvfp4_instantiation(shared: str | None, clamp: float = 10.0) -> str:
    """`sm100_nvfp4_mega_moe_impl` (the kernel vLLM's MEGA_MOE_NVFP4 launches, and so the one the DeepSeek V4
    patch wires) at DSV4 Pro's shapes; `shared`: None, "mxfp8" (DSV4 Pro's FP8 shared expert, fused) or
    "bf16". Same tile configuration as above; per-token activation scales on (kUseXScales), clamp before
    SiLU, no compact dispatch, batched SF pulls or decode shape (the plainest instance)."""
    dtype = {None: "cutlass::float_e4m3_t", "mxfp8": "cutlass::float_e4m3_t", "bf16": "cutlass::bfloat16_t"}[shared]
    args = [256, DSV4_PRO["hidden"], DSV4_PRO["intermediate"], DSV4_PRO["experts"], int(shared is not None),
            DSV4_PRO["topk"],
            128, 128, 256, 32, 128, 128, 1024, 1024, 6, 512,  # tiles, SF blocks, rings, stages, pull bytes
            128, 128, 256, SMS, RANKS,                       # dispatch / MMA / epilogue threads
            f"{clamp}f", "false", "1.0f", "0.0f", "true",    # clamp, clamp after SiLU, alpha, beta, fast math
            "cutlass::float_e2m1_t", dtype, 128,             # routed weights, shared dtype, SHARED_BLOCK_K
            "true", "false", "false", "false"]               # x scales, compact dispatch, batched SF, decode
    return (f"#include <{NVFP4_HEADER}>\nusing namespace deep_gemm;\nstatic void __instantiate_kernel() {{\n"
            f"    auto ptr = reinterpret_cast<void*>(&sm100_nvfp4_mega_moe_impl<\n        "
            + ",\n        ".join(map(str, args)) + "\n    >);\n}\n")


@pytest.mark.parametrize("shared", [None, "mxfp8"], ids=["routed-only", "fused-mxfp8-shared"])
def test_dsv4_pro_nvfp4_mega_moe_compiles_for_sm_100f_with_the_block16_mma(tree, tmp_path, shared):
    """The wired kernel: the routed experts on the 2-CTA block-16 NVFP4 MMA; DSV4 Pro's FP8 shared expert,
    fused as MXFP8, on the MXF8F6F4 MMA (`UTCQMMA`) and only when fused; no local memory."""
    _nvcc(), _cuobjdump()
    if not (tree / "deep_gemm/include" / NVFP4_HEADER).is_file():
        pytest.fail(f"{tree}: the deepgemm tree has no {NVFP4_HEADER}")
    r, cubin = compile_(tree, nvfp4_instantiation(shared), "sm_100f", tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    text, usage = sass(cubin)
    assert re.search(r"sm100_nvfp4_mega_moe_implILj256ELj7168ELj3072ELj384ELj%dELj6E" % int(shared is not None), text)
    found = mmas(text)
    assert "UTCOMMA.2CTA.4X" in found, found
    assert any(m.startswith("UTCQMMA") for m in found) == (shared == "mxfp8"), found
    assert not any(m.startswith("UTCHMMA") for m in found), found  # no BF16 MMA: the shared expert stays FP8
    assert re.search(r"\bLOCAL:0\b", usage), usage


def test_scale_vec_4x_spelling_is_refused_on_sm_100f_and_assembles_on_sm_100a(tree, tmp_path):
    """The field report's Build 17 failure, on this kernel: `scale_vec::4X` needs the arch-specific
    target; `.block16` (what the tree uses on CUDA >= 12.9) does not."""
    _nvcc(), _cuobjdump()
    over = tmp_path / "include"
    shutil.copytree(tree / "deep_gemm/include/deep_gemm", over / "deep_gemm")
    n = 0
    for p in (over / "deep_gemm/ptx").glob("*.cuh"):
        s = p.read_text()
        n += s.count("kind::mxf4nvf4.block_scale.block16")
        p.write_text(s.replace("kind::mxf4nvf4.block_scale.block16", "kind::mxf4nvf4.block_scale.scale_vec::4X"))
    assert n >= 2, "the tree's PTX wrappers no longer spell kind::mxf4nvf4 .block16"
    r, cubin = compile_(tree, instantiation(0), "sm_100f", tmp_path, [over])
    assert r.returncode != 0 and "scale_vec::4X" in r.stderr and not cubin.exists(), r.stderr[-2000:]
    r, cubin = compile_(tree, instantiation(0), "sm_100a", tmp_path, [over])
    assert r.returncode == 0, r.stderr[-4000:]
    assert "UTCOMMA.2CTA.4X" in mmas(sass(cubin)[0])
