"""Which targets assemble the NVFP4 block-scaled MMA (`tcgen05.mma.kind::mxf4nvf4`), in its two spellings.

The rule a DeepGEMM/CUTLASS wrapper must follow (measured with nvcc 13.0): on CUDA >= 12.9 the `.block16`
spelling assembles on the family targets (sm_100f, sm_103f, sm_110f) and on the arch-specific ones; the
older `scale_vec::4X` spelling only on arch-specific `a` targets (sm_100a, sm_103a, sm_110a) and is
refused on every family target; plain sm_100 (and sm_90a) refuse both. Both spellings give the same SASS
(nvdisasm prints the SM103 form `UTCOMMA.BLOCK16`, the SM100/SM110 form `UTCOMMA.4X`). So a kernel needs no
arch-specific JIT target for NVFP4 when the compiler has `.block16`, which is what DeepGEMM 2.8.1 and
CUTLASS do (`.block16`, `scale_vec::4X` only below 12.9).

The probe is kernels/nvfp4/mma_nvfp4_raw_probe.cu (raw inline PTX, one kernel per CTA group, never
launched); the `.block16` variant is the same file with the spelling replaced. No DeepGEMM tree needed.
Skips with the reason where nvcc (>= 12.9), cuobjdump or nvdisasm are missing
(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "kernels" / "nvfp4" / "mma_nvfp4_raw_probe.cu"
VEC4X, BLOCK16 = "scale_vec::4X", "block16"

FAMILY = ("sm_100f", "sm_103f", "sm_110f")
ARCH_SPECIFIC = ("sm_100a", "sm_103a", "sm_110a")
PLAIN = ("sm_100", "sm_90a")
# nvdisasm's name for the 4-scales-per-row UMMA, per SM generation (cta_group::1 and ::2)
SASS = {"sm_100": ["UTCOMMA.2CTA.4X", "UTCOMMA.4X"], "sm_103": ["UTCOMMA.2CTA.BLOCK16", "UTCOMMA.BLOCK16"],
        "sm_110": ["UTCOMMA.2CTA.4X", "UTCOMMA.4X"]}


def _nvcc() -> str:
    exe = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(exe).is_file():
        pytest.skip("nvcc not found (PATH, $NVCC, /usr/local/cuda/bin): the PTX rule needs the CUDA compiler")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if not m or (int(m[1]), int(m[2])) < (12, 9):
        pytest.skip(f"nvcc {m[0] if m else '?'} predates CUDA 12.9 (no .block16, no arch families): the rule is for >= 12.9")
    return exe


def _cuobjdump() -> tuple[str, dict]:
    dirs = []
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        dirs += [p.parent for p in Path(base).glob("*/bin/cuobjdump")]
    exe = shutil.which("cuobjdump") or next((str(d / "cuobjdump") for d in dirs), None)
    if not exe:
        pytest.skip("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(exe).parent), *map(str, dirs), os.environ.get("PATH", "")])}
    if not shutil.which("nvdisasm", path=env["PATH"]):
        pytest.skip("nvdisasm not found (cuobjdump needs it for SASS): pip install nvidia-cuda-nvdisasm")
    return exe, env


def _probe(tmp: Path, spelling: str) -> Path:
    src = PROBE.read_text()
    assert src.count(f".block_scale.{VEC4X} ") == 2, "the probe no longer issues both CTA groups in the 4X spelling"
    path = tmp / f"probe_{spelling.replace(':', '')}.cu"
    path.write_text(src.replace(f".block_scale.{VEC4X} ", f".block_scale.{spelling} "))
    return path


def _compile(src: Path, target: str) -> tuple[subprocess.CompletedProcess, Path]:
    cubin = src.with_name(f"{src.stem}.{target}.cubin")
    r = subprocess.run([_nvcc(), "-std=c++20", "-cubin", f"-arch={target}", "-o", str(cubin), str(src)],
                       capture_output=True, text=True, timeout=300)
    return r, cubin


def _umma(cubin: Path) -> list[str]:
    exe, env = _cuobjdump()
    r = subprocess.run([exe, "--dump-sass", str(cubin)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return sorted(re.findall(r"\bUTC[A-Z0-9.]*MMA[A-Z0-9.]*", r.stdout))


@pytest.mark.parametrize("target", FAMILY + ARCH_SPECIFIC)
def test_block16_assembles_on_family_and_arch_specific_targets(tmp_path, target):
    r, cubin = _compile(_probe(tmp_path, BLOCK16), target)
    assert r.returncode == 0, f"{target} must accept kind::mxf4nvf4 .block16:\n{r.stderr}"
    assert _umma(cubin) == SASS[target[:-1]], target


@pytest.mark.parametrize("target", ARCH_SPECIFIC)
def test_scale_vec_4x_assembles_on_arch_specific_targets_with_the_same_sass(tmp_path, target):
    r, cubin = _compile(_probe(tmp_path, VEC4X), target)
    assert r.returncode == 0, f"{target} must accept kind::mxf4nvf4 scale_vec::4X:\n{r.stderr}"
    assert _umma(cubin) == SASS[target[:-1]], target


@pytest.mark.parametrize("target", FAMILY)
def test_scale_vec_4x_is_refused_on_family_targets(tmp_path, target):
    r, cubin = _compile(_probe(tmp_path, VEC4X), target)
    assert r.returncode != 0 and ".scale_vec::4X" in r.stderr, (target, r.stderr)
    assert not cubin.exists()


@pytest.mark.parametrize("spelling", [BLOCK16, VEC4X])
@pytest.mark.parametrize("target", PLAIN)
def test_plain_targets_refuse_both_spellings(tmp_path, target, spelling):
    r, _ = _compile(_probe(tmp_path, spelling), target)
    assert r.returncode != 0 and "not supported on .target" in r.stderr, (target, spelling, r.stderr)
