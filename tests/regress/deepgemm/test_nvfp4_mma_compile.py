"""Compile level: the NVFP4 block-scaled MMA (`tcgen05.mma.kind::mxf4nvf4`) and where it assembles.

The rule (nvcc 13.0, checked here): the `.block16` spelling assembles for the family targets sm_100f and
sm_103f and for sm_100a, with the same SASS on SM100 (`UTCOMMA.4X`, `UTCOMMA.2CTA.4X`; nvdisasm spells the
SM103 form `UTCOMMA.BLOCK16`); the older `scale_vec::4X`
spelling only for sm_100a; sm_100 and sm_90a reject both. So no kernel needs an arch-specific target for
NVFP4 on a compiler that has `.block16` (CUDA >= 12.9), and below 12.9 the JIT targets sm_100a anyway
(test_jit_arch_target.py).

- test_raw_ptx_* need no DeepGEMM tree: the probes are raw inline PTX written by the test.
- test_tree_headers_issue_nvfp4_umma is behavioural: it finds, in whatever tree it is given, the device
  wrappers whose inline PTX is the NVFP4 MMA (by the instruction, not by our names), issues each from a
  probe kernel and reads the SASS. It is what decides whether upstream has caught up (Drop-When).
- test_nvfp4_instr_desc_bits checks the descriptor helper this stack adds, decoded with the PTX-ISA table.
SASS mnemonics: cta_group::1 -> UTCOMMA.4X, cta_group::2 -> UTCOMMA.2CTA.4X; kind::mxf8f6f4 (the
UE8M0 fallback) -> UTCQMMA; kind::mxf4 block32 -> UTCOMMA without .4X.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("dsv4_deepgemm_cuda_tools", Path(__file__).with_name("_cuda_tools.py"))
ct = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ct)

FAMILY = ("sm_100f", "sm_103f")
PLAIN = ("sm_100", "sm_90a")
# nvdisasm spells the same 4-scales-per-row UMMA `.4X` for SM100 and `.BLOCK16` for SM103 (measured, nvcc 13.0)
UMMA = {t: ["UTCOMMA.2CTA.4X", "UTCOMMA.4X"] for t in ("sm_100a", "sm_100f")}
UMMA["sm_103f"] = ["UTCOMMA.2CTA.BLOCK16", "UTCOMMA.BLOCK16"]


def _mnemonics(sass: str) -> list[str]:
    return re.findall(r"\bUTC[A-Z0-9.]*MMA[A-Z0-9.]*", sass)


def _raw_probe(path: Path, spelling: str) -> Path:
    kernels = []
    for group in (1, 2):
        kernels.append(f'''
extern "C" __global__ void nvfp4_mma_probe_{group}cta(uint32_t tmem_c, uint64_t desc_a, uint64_t desc_b,
        uint32_t idesc, uint32_t tmem_sfa, uint32_t tmem_sfb, uint32_t accumulate) {{
    asm volatile("{{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %4, 0;\\n\\t"
                 "tcgen05.mma.cta_group::{group}.kind::mxf4nvf4.block_scale.{spelling} [%0], %1, %2, %3, [%5], [%6], p;\\n\\t}}\\n"
                 :: "r"(tmem_c), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate), "r"(tmem_sfa), "r"(tmem_sfb));
}}''')
    path.write_text("#include <cstdint>\n" + "\n".join(kernels) + "\n")
    return path


def test_raw_ptx_block16_assembles_on_family_targets(tmp_path):
    src = _raw_probe(tmp_path / "block16.cu", "block16")
    for target in FAMILY + ("sm_100a",):
        r = ct.compile_cubin(src, target, tmp_path / f"{target}.cubin")
        assert r.returncode == 0, f"{target} must accept kind::mxf4nvf4 .block16:\n{r.stderr}"
        found = sorted(_mnemonics(ct.sass(tmp_path / f"{target}.cubin")))
        assert found == UMMA[target], (target, found)
    for target in PLAIN:
        r = ct.compile_cubin(src, target, tmp_path / f"{target}.cubin")
        assert r.returncode != 0 and "not supported on .target" in r.stderr, (target, r.stderr)


def test_raw_ptx_scale_vec_4x_only_on_sm100a(tmp_path):
    src = _raw_probe(tmp_path / "vec4x.cu", "scale_vec::4X")
    ok = ct.compile_cubin(src, "sm_100a", tmp_path / "a.cubin")
    assert ok.returncode == 0, ok.stderr
    assert sorted(_mnemonics(ct.sass(tmp_path / "a.cubin"))) == ["UTCOMMA.2CTA.4X", "UTCOMMA.4X"]
    for target in FAMILY:
        r = ct.compile_cubin(src, target, tmp_path / f"{target}.cubin")
        assert r.returncode != 0 and ".scale_vec::4X" in r.stderr, (target, r.stderr)
    for target in PLAIN:
        assert ct.compile_cubin(src, target, tmp_path / f"{target}.cubin").returncode != 0


# ------------------------------------------------------------------------- the tree's own wrappers
WRAPPER_RE = re.compile(r"^struct (\w+) \{(.*?)^\};", re.M | re.S)


def nvfp4_wrappers(tree: Path) -> list[tuple[str, str, int]]:
    """(header, struct name, cta group) of every device wrapper in the tree whose inline PTX is the NVFP4
    MMA: found by the instruction text, so it works whatever the tree names them."""
    found = []
    root = tree / "deep_gemm" / "include"
    for h in sorted(root.rglob("*.cuh")):
        for name, body in WRAPPER_RE.findall(h.read_text(errors="replace")):
            m = re.search(r"tcgen05\.mma\.cta_group::([12])\.kind::mxf4nvf4\.block_scale", body)
            if m and "fma(" in body:
                found.append((h.relative_to(root).as_posix(), name, int(m.group(1))))
    return found


def _wrapper_probe(path: Path, wrappers) -> Path:
    includes = sorted({f"#include <{h}>" for h, _, _ in wrappers})
    calls = [f'''extern "C" __global__ void probe_{i}(uint64_t a, uint64_t b, uint32_t c, uint32_t s, uint64_t d,
        uint32_t sfa, uint32_t sfb) {{ deep_gemm::ptx::{name}::fma(a, b, c, s, d, sfa, sfb); }}'''
             for i, (_, name, _) in enumerate(wrappers)]
    # the wrappers use CUTLASS macros (CUTLASS_DEVICE) and expect them defined by an earlier include
    path.write_text("#include <cstdint>\n#include <cutlass/cutlass.h>\n" + "\n".join(includes) + "\n" + "\n".join(calls) + "\n")
    return path


def test_tree_headers_issue_nvfp4_umma(dsv4_tree, tmp_path):
    """The tree's headers issue the NVFP4 block-scaled UMMA on the family target (sm_100f): E2M1 x E2M1
    with UE4M3 block-16 scales, never the UE8M0 `kind::mxf8f6f4` fallback."""
    tree = dsv4_tree("deepgemm")
    wrappers = nvfp4_wrappers(tree)
    assert wrappers, "no device wrapper in deep_gemm/include issues tcgen05.mma...kind::mxf4nvf4"
    inc = [tree / "deep_gemm" / "include", ct.cutlass_include(tree)]
    src = _wrapper_probe(tmp_path / "wrappers.cu", wrappers)
    for target in ("sm_100f", "sm_100a"):
        r = ct.compile_cubin(src, target, tmp_path / f"{target}.cubin", includes=inc)
        assert r.returncode == 0, f"{target}: {r.stderr[-2000:]}"
        found = _mnemonics(ct.sass(tmp_path / f"{target}.cubin"))
        want = {1: "UTCOMMA.4X", 2: "UTCOMMA.2CTA.4X"}
        assert sorted(found) == sorted(want[g] for _, _, g in wrappers), (target, found)


def _field(v: int, lo: int, width: int) -> int:
    return (v >> lo) & ((1 << width) - 1)


DESC_PROBE = r'''
#include <cstdio>
#include <cstdint>
#include <deep_gemm/mma/sm100.cuh>
template <uint32_t M, uint32_t N> uint32_t desc() {
    return static_cast<uint32_t>(deep_gemm::mma::sm100::make_nvfp4_instr_desc<M, N, cute::UMMA::Major::K, cute::UMMA::Major::K>());
}
int main() { std::printf("desc_1cta=0x%08x\ndesc_2cta=0x%08x\n", desc<128, 256>(), desc<256, 256>()); }
'''


def test_nvfp4_instr_desc_bits(dsv4_tree, tmp_path):
    """Host build of the descriptor helper; decode its bits with the PTX-ISA instruction-descriptor table."""
    tree = dsv4_tree("deepgemm")
    inc = [tree / "deep_gemm" / "include", ct.cutlass_include(tree)]
    src = tmp_path / "desc.cu"
    src.write_text(DESC_PROBE)
    exe = tmp_path / "desc"
    cmd = [ct.nvcc(), "-std=c++20", "-gencode", "arch=compute_100a,code=sm_100a", *[f"-I{i}" for i in inc],
           "-o", str(exe), str(src)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert b.returncode == 0, b.stderr[-2000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout
    descs = dict(line.split("=") for line in out.split())
    for key, m, n in (("desc_1cta", 128, 256), ("desc_2cta", 256, 256)):
        d = int(descs[key], 16)
        assert _field(d, 0, 3) == 0                  # dense
        assert _field(d, 4, 2) == 0                  # B scale-factor id (4 per MMA: always 0)
        assert _field(d, 7, 3) == 1 and _field(d, 10, 3) == 1  # A, B = E2M1
        assert _field(d, 13, 2) == 0                 # no negate
        assert _field(d, 15, 2) == 0                 # both K-major
        assert _field(d, 17, 6) == n >> 3
        assert _field(d, 23, 1) == 0                 # scale format UE4M3 (1 would be UE8M0)
        assert _field(d, 24, 5) == m >> 4
        assert _field(d, 29, 2) == 0                 # A scale-factor id
        assert _field(d, 31, 1) == 0                 # dense K = 64


def test_pristine_pin_headers_have_no_nvfp4_mma(dsv4_tree):
    """The bug, at the pin: no wrapper issues kind::mxf4nvf4 (the behaviour test above fails there)."""
    assert nvfp4_wrappers(dsv4_tree("deepgemm", patched=False)) == []
