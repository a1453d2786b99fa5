"""nvcc / cuobjdump / CUTLASS discovery for the DeepGEMM compile tests (skips carry the reason)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def nvcc() -> str:
    path = os.environ.get("NVCC") or shutil.which("nvcc")
    for cand in (path, "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    pytest.skip("nvcc not found (PATH, $NVCC, /usr/local/cuda/bin): compile tests need the CUDA compiler")


def cuobjdump() -> tuple[str, dict]:
    """cuobjdump and an environment where it finds nvdisasm (PyPI: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)."""
    dirs = []
    spec = importlib.util.find_spec("nvidia")
    if spec and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            dirs += [p.parent for p in Path(base).glob("*/bin/cuobjdump")]
    exe = shutil.which("cuobjdump") or next((str(d / "cuobjdump") for d in dirs), None)
    if not exe:
        pytest.skip("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(exe).parent)] + [str(d) for d in dirs] + [env.get("PATH", "")])
    if not (shutil.which("nvdisasm", path=env["PATH"])):
        pytest.skip("nvdisasm not found (cuobjdump needs it for SASS): pip install nvidia-cuda-nvdisasm")
    return exe, env


def compile_cubin(src: Path, target: str, out: Path, includes=(), defines=()) -> subprocess.CompletedProcess:
    cmd = [nvcc(), "-std=c++20", "-cubin", f"-arch={target}", "-o", str(out), str(src)]
    cmd += [f"-I{i}" for i in includes] + [f"-D{d}" for d in defines]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def sass(cubin: Path) -> str:
    exe, env = cuobjdump()
    r = subprocess.run([exe, "--dump-sass", str(cubin)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def cutlass_include(tree: Path) -> Path:
    """CUTLASS headers for DeepGEMM's includes: $DSV4_CUTLASS_INCLUDE, the tree's populated submodule, or
    the submodule's pinned commit archived from $DSV4_CUTLASS_GIT_MIRROR (a git dir of NVIDIA/cutlass)."""
    env = os.environ.get("DSV4_CUTLASS_INCLUDE")
    if env and (Path(env) / "cute").is_dir():
        return Path(env)
    sub = tree / "third-party" / "cutlass" / "include"
    if (sub / "cute").is_dir():
        return sub
    mirror = os.environ.get("DSV4_CUTLASS_GIT_MIRROR")
    if mirror:
        ls = subprocess.run(["git", "-C", str(tree), "ls-tree", "HEAD", "third-party/cutlass"],
                            capture_output=True, text=True)
        parts = ls.stdout.split()
        if ls.returncode == 0 and len(parts) >= 3:
            commit = parts[2]
            dest = ROOT / "build" / f"cutlass-{commit[:12]}"
            if not (dest / "include" / "cute").is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                arch = subprocess.run(["git", f"--git-dir={mirror}", "archive", commit, "include"],
                                      capture_output=True)
                if arch.returncode == 0:
                    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch.stdout, check=True)
            if (dest / "include" / "cute").is_dir():
                return dest / "include"
    pytest.skip("CUTLASS headers unavailable: set DSV4_CUTLASS_INCLUDE, or DSV4_CUTLASS_GIT_MIRROR to a git dir "
                "of NVIDIA/cutlass holding DeepGEMM's submodule commit")
