"""Fixtures for the vLLM v0.33.0 variants of the regression tests (the stack refreshed by
`patches/vllm/releases/v0.33.0`).

Same scheme as ../conftest.py (overlay venvs, one check script per patch, run once per session),
with three differences:

- The trees are the v0.33.0 release's: DSV4_TREE_VLLM (patched) and DSV4_BASE_VLLM (pristine) where
  `dsv4-patch regress vllm@v0.33.0` (or `bump`) set them to a v0.33.0 tree, else the release's own
  trees built through the engine (`dsv4_tree("vllm", release="v0.33.0")`), as plain pytest and CI do.
- vLLM 0.33.0 requires torch==2.14.0, which is not on this machine's disk (only the 2.13.0 CPU
  build and a 2.14.1 CUDA build are), and pip would pull the multi-GB CUDA 2.14.0 from PyPI. So the
  base venv is NOT made by build_overlay's `pip install vllm==0.33.0`: it is a hard-link clone of the
  v0.27.1 base venv (torch 2.13.0+cpu, built by ../conftest.py) with `pip install --no-deps
  vllm==0.33.0` on top (the v0.27.1 base venv is built first when missing). vLLM's Python
  modules import with it; its compiled ops (vllm._C) do not
  load, which these CPU checks do not need. build_overlay then only overlays (installed == 0.33.0).
- Check scripts are looked up in v0_33/checks first, then ../checks (unchanged ones are shared).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from _vllm_venvs import BYTECODE_FILE, PACKAGE, check_runner, hardlink_clone, overlay_pair, release_base, release_version
from dsv4_patch.build import venv_python
from dsv4_patch.sources.base import Cache

HERE = Path(__file__).resolve().parent
CHECK_DIRS = [HERE / "checks", HERE.parent / "checks"]
VERSION, OLD_VERSION = "0.33.0", "0.27.1"


def _trees(dsv4_tree) -> tuple[Path, Path]:
    patched, base = os.environ.get("DSV4_TREE_VLLM"), os.environ.get("DSV4_BASE_VLLM")
    if patched and base and release_version(Path(base)) == VERSION:
        patched, base = Path(patched), Path(base)
    else:  # plain pytest, or a regress run of the v0.27.1 release: this release's own trees
        patched = dsv4_tree("vllm", release=f"v{VERSION}")
        base = dsv4_tree("vllm", patched=False, release=f"v{VERSION}")
    for t in (patched, base):
        if release_version(t) != VERSION:
            pytest.skip(f"v0.33.0 variants: {t} is vLLM {release_version(t)}, not {VERSION}")
    return patched, base


def _make_base_venv(venv: Path, old_base_tree) -> None:
    """vllm==0.33.0 (no deps) over a clone of the v0.27.1 base venv (torch 2.13.0+cpu). That venv is
    built here when missing (old_base_tree() gives its pristine tree): under pytest-xdist the v0.27.1
    tests may run later, or on another worker."""
    if venv_python(venv).exists():
        return
    old = release_base(old_base_tree(), OLD_VERSION)

    def install(tmp: Path) -> None:
        (tmp / ".dsv4-build.json").unlink(missing_ok=True)  # a hard link: unlink, never rewrite
        (tmp / BYTECODE_FILE).unlink(missing_ok=True)  # the 0.33.0 modules get theirs in release_base
        # humming-kernels: vLLM 0.33.0 pins 0.1.19 (requirements/cuda.txt) and imports it at module
        # level (quantization/utils/humming); the v0.27.1 venv has none (GPU_ONLY). Pure Python, no deps.
        # The tool's archive cache may hold the release's wheel already (the DeepGEMM 2.8.1 source
        # reads it, sha256-checked): install that file rather than download 336 MB again.
        cached = sorted((Cache.default().root / "archives").glob(f"{PACKAGE}-{VERSION}-*.whl"))
        subprocess.run([str(venv_python(tmp)), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                        "--no-compile", "--no-deps", str(cached[0]) if cached else f"{PACKAGE}=={VERSION}",
                        "humming-kernels==0.1.19"], check=True, capture_output=True, text=True)

    hardlink_clone(old, venv, prepare=install)


@pytest.fixture(scope="session")
def vllm_trees(dsv4_tree) -> tuple[Path, Path]:
    return _trees(dsv4_tree)


@pytest.fixture(scope="session")
def vllm_venvs(vllm_trees, dsv4_tree) -> dict[bool, Path]:
    patched_tree, base_tree = vllm_trees
    old_tree = lambda: dsv4_tree("vllm", patched=False, release=f"v{OLD_VERSION}")  # noqa: E731
    return overlay_pair(base_tree, patched_tree, VERSION, make_base=lambda v: _make_base_venv(v, old_tree))


@pytest.fixture(scope="session")
def vllm_check(vllm_venvs, vllm_trees):
    return check_runner(vllm_venvs, CHECK_DIRS, vllm_trees[0])
