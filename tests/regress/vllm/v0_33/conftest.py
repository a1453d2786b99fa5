"""Fixtures for the vLLM v0.33.0 variants of the regression tests (the stack refreshed by
`dsv4-patch bump vllm 0.33.0 --into patches/vllm/bumps/v0.33.0`).

Same scheme as ../conftest.py (overlay venvs, one check script per patch, run once per session),
with three differences:

- The trees are never built here: DSV4_TREE_VLLM (patched) and DSV4_BASE_VLLM (pristine) must point
  at a v0.33.0 tree, as `dsv4-patch bump`/`regress` set them; otherwise every test here skips
  (the pinned stack is v0.27.1, which ../ tests).
- vLLM 0.33.0 requires torch==2.14.0, which is not on this machine's disk (only the 2.13.0 CPU
  build and a 2.14.1 CUDA build are), and pip would pull the multi-GB CUDA 2.14.0 from PyPI. So the
  base venv is NOT made by build_overlay's `pip install vllm==0.33.0`: it is a hard-link clone of the
  v0.27.1 base venv (torch 2.13.0+cpu, built by ../conftest.py) with `pip install --no-deps
  vllm==0.33.0` on top. vLLM's Python modules import with it; its compiled ops (vllm._C) do not
  load, which these CPU checks do not need. build_overlay then only overlays (installed == 0.33.0).
- Check scripts are looked up in v0_33/checks first, then ../checks (unchanged ones are shared).
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

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).resolve().parent
CHECK_DIRS = (HERE / "checks", HERE.parent / "checks")
PACKAGE, VERSION, OLD_VERSION = "vllm", "0.33.0", "0.27.1"
PRUNE = ("torchvision", "torchaudio", "torchcodec")


def venv_cache() -> Path:
    env = os.environ.get("DSV4_VENV_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dsv4-patch" / "venvs"


def tree_version(tree: Path) -> str | None:
    f = tree / "vllm" / "_version.py"
    if not f.is_file():
        return None
    m = re.search(r"^__version__ = version = '([^']+)'", f.read_text(), re.M)
    return m.group(1) if m else None


def _trees() -> tuple[Path, Path]:
    patched, base = os.environ.get("DSV4_TREE_VLLM"), os.environ.get("DSV4_BASE_VLLM")
    if not (patched and base):
        pytest.skip("v0.33.0 variants: set DSV4_TREE_VLLM/DSV4_BASE_VLLM to a v0.33.0 tree "
                    "(`dsv4-patch bump vllm 0.33.0` does)")
    patched, base = Path(patched), Path(base)
    for t in (patched, base):
        if tree_version(t) != VERSION:
            pytest.skip(f"v0.33.0 variants: {t} is vLLM {tree_version(t)}, not {VERSION}")
    return patched, base


def _pip(py: Path, *args: str) -> None:
    subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args],
                   check=True, capture_output=True, text=True)


def _prune(py: Path) -> None:
    code = "import importlib.util as u, sys; print(' '.join(n for n in sys.argv[1:] if u.find_spec(n)))"
    present = subprocess.run([str(py), "-c", code, *PRUNE], capture_output=True, text=True).stdout.split()
    if present:
        subprocess.run([str(py), "-m", "pip", "uninstall", "-y", "-q", *present], check=True,
                       capture_output=True)


def _make_base_venv(venv: Path) -> None:
    """vllm==0.33.0 (no deps) over a clone of the v0.27.1 base venv (torch 2.13.0+cpu)."""
    if venv_python(venv).exists():
        return
    old = venv_cache() / f"{PACKAGE}-{OLD_VERSION}" / "base"
    if not venv_python(old).exists():
        pytest.skip(f"v0.33.0 variants: {old} missing; run tests/regress/vllm (v0.27.1) once first")
    tmp = venv.with_name(venv.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(old), str(tmp)], check=True)
    (tmp / ".dsv4-build.json").unlink(missing_ok=True)  # a hard link: unlink, never rewrite
    _pip(venv_python(tmp), "--no-deps", f"{PACKAGE}=={VERSION}")  # new inodes; the old venv keeps its files
    _prune(venv_python(tmp))
    os.replace(tmp, venv)


@pytest.fixture(scope="session")
def vllm_venvs() -> dict[bool, Path]:
    patched_tree, base_tree = _trees()
    root = venv_cache() / f"{PACKAGE}-{VERSION}"
    base_venv, patched_venv = root / "base", root / "patched"
    try:
        _make_base_venv(base_venv)
        build_overlay(base_tree, base_tree, base_venv, package=PACKAGE, version=VERSION)
        if not venv_python(patched_venv).exists():
            tmp = root / "patched.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(["cp", "-al", str(base_venv), str(tmp)], check=True)
            os.replace(tmp, patched_venv)
        build_overlay(base_tree, patched_tree, patched_venv, package=PACKAGE, version=VERSION)
    except (Dsv4Error, subprocess.CalledProcessError) as e:
        msg = e.one_line() if isinstance(e, Dsv4Error) else f"{e.cmd}: {(e.stderr or '')[-2000:]}"
        pytest.fail(f"v0.33.0 overlay build failed: {msg}")
    return {False: base_venv, True: patched_venv}


def _script(name: str) -> Path:
    for d in CHECK_DIRS:
        if (d / f"{name}.py").is_file():
            return d / f"{name}.py"
    raise FileNotFoundError(name)


def run_in_venv(venv: Path, script: Path, *, timeout: int = 900):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "TRITON_"))}
    full.update({
        # the oracles in kernels/; ../checks for _harness and the shared check scripts
        "PYTHONPATH": os.pathsep.join(str(p) for p in (ROOT, HERE.parent / "checks")),
        "CUDA_VISIBLE_DEVICES": "",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    return subprocess.run([str(venv_python(venv)), str(script)], capture_output=True, text=True,
                          env=full, cwd=str(ROOT), timeout=timeout)


@pytest.fixture(scope="session")
def vllm_check(vllm_venvs):
    cache: dict[tuple[str, bool], dict] = {}

    def get(name: str, patched: bool = True) -> dict:
        key = (name, patched)
        if key not in cache:
            r = run_in_venv(vllm_venvs[patched], _script(name))
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("DSV4-CHECK ")]
            if not lines:
                pytest.fail(f"check {name} ({'patched' if patched else 'unpatched'}) printed no result "
                            f"(rc {r.returncode}):\n{r.stderr[-4000:]}")
            cache[key] = json.loads(lines[-1][len("DSV4-CHECK "):])
        return cache[key]

    return get
