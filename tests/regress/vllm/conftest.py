"""Fixtures for the vLLM regression tests (integration level, SPEC §4).

The patched upstream modules are imported from an install of the pinned release (the wheel from
PyPI, built by dsv4_patch.build.build_overlay) with the stack's patched Python files overlaid, and
exercised on CPU. Two venvs live in a cache outside the repo (DSV4_VENV_CACHE, default
~/.cache/dsv4-patch/venvs):

    vllm-0.27.1/base      the release as installed from its wheel (no overlay)
    vllm-0.27.1/patched   a hard-link clone of base with the patched files overlaid

The first run installs once (a few minutes); later runs reuse both (build_overlay's stamp).

`vllm_check(name, patched=True)` runs tests/regress/vllm/checks/<name>.py inside one venv, once
per session, and returns its JSON: {sub-check: {"ok": bool, "error": str}}. Each check script is
the same code for the patched and the unpatched tree; the tests expect it to pass on the first and
fail on the second.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dsv4_patch.build import build_overlay, venv_python
from dsv4_patch.errors import Dsv4Error

ROOT = Path(__file__).resolve().parents[3]
CHECKS = Path(__file__).resolve().parent / "checks"
PACKAGE, VERSION = "vllm", "0.27.1"
# CUDA builds from PyPI that cannot load beside the CPU torch and are not needed on CPU.
PRUNE = ("torchvision", "torchaudio", "torchcodec")


def release_version(tree: Path) -> str | None:
    """The release a tree holds, from the `__version__` setuptools-scm wrote into the sdist."""
    f = tree / "vllm" / "_version.py"
    m = re.search(r"^__version__\s*=\s*(?:\w+\s*=\s*)*['\"]([^'\"]+)['\"]", f.read_text(), re.M) if f.exists() else None
    return m.group(1) if m else None


def venv_cache() -> Path:
    env = os.environ.get("DSV4_VENV_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dsv4-patch" / "venvs"


def _prune(py: Path) -> None:
    code = "import importlib.util as u, sys; print(' '.join(n for n in sys.argv[1:] if u.find_spec(n)))"
    present = subprocess.run([str(py), "-c", code, *PRUNE], capture_output=True, text=True).stdout.split()
    if present:
        subprocess.run([str(py), "-m", "pip", "uninstall", "-y", "-q", *present], check=True,
                       capture_output=True)


@pytest.fixture(scope="session")
def vllm_venvs(dsv4_tree) -> dict[bool, Path]:
    base_tree = dsv4_tree("vllm", patched=False)
    patched_tree = dsv4_tree("vllm")
    tree_version = release_version(base_tree)
    if tree_version != VERSION:
        # These venvs are the v0.27.1 recipe (CPU torch 2.13.0). Another release pins another torch,
        # and installing it here would pull a multi-GB CUDA build: it needs its own recipe.
        pytest.skip(f"the trees are vLLM {tree_version}; these checks build vLLM {VERSION} venvs "
                    "(tests/regress/vllm/v0_33 holds the v0.33.0 recipe)")
    root = venv_cache() / f"{PACKAGE}-{VERSION}"
    base_venv, patched_venv = root / "base", root / "patched"
    try:
        build_overlay(base_tree, base_tree, base_venv, package=PACKAGE, version=VERSION)
        _prune(venv_python(base_venv))
        if not venv_python(patched_venv).exists():
            # A hard-link clone: no second install, no second 5 GB. build_overlay writes new
            # inodes, so the overlay never reaches the base venv.
            tmp = root / "patched.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(["cp", "-al", str(base_venv), str(tmp)], check=True)
            os.replace(tmp, patched_venv)
        build_overlay(base_tree, patched_tree, patched_venv, package=PACKAGE, version=VERSION)
    except Dsv4Error as e:
        pytest.fail(f"overlay build failed: {e.one_line()}")
    return {False: base_venv, True: patched_venv}


def run_in_venv(venv: Path, script: Path, *, env: dict | None = None, timeout: int = 600):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "TRITON_"))}
    full.update({
        "PYTHONPATH": str(ROOT),           # the oracles in kernels/
        "CUDA_VISIBLE_DEVICES": "",        # CPU; keeps vLLM's Triton import enabled for the interpreter
        "VLLM_LOGGING_LEVEL": "WARNING",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    full.update(env or {})
    return subprocess.run([str(venv_python(venv)), str(script)], capture_output=True, text=True,
                          env=full, cwd=str(ROOT), timeout=timeout)


@pytest.fixture(scope="session")
def vllm_check(vllm_venvs):
    cache: dict[tuple[str, bool], dict] = {}

    def get(name: str, patched: bool = True) -> dict:
        key = (name, patched)
        if key not in cache:
            r = run_in_venv(vllm_venvs[patched], CHECKS / f"{name}.py")
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("DSV4-CHECK ")]
            if not lines:
                pytest.fail(f"check {name} ({'patched' if patched else 'unpatched'}) printed no result "
                            f"(rc {r.returncode}):\n{r.stderr[-4000:]}")
            cache[key] = json.loads(lines[-1][len("DSV4-CHECK "):])
        return cache[key]

    return get
