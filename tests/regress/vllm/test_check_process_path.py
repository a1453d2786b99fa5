"""kernels/ is a namespace package (no __init__.py), so PyPI's `kernels` wins over it wherever it is
installed: in a check script's process, and in a user's vLLM venv run from the project root (the
README's `.venv-vllm/bin/python -c "import vllm..."`: '' on sys.path).

A check script's process leaves the import name `kernels` to PyPI's `kernels` package (Hugging
Face's, which transformers >= 5.25 requires and imports whenever it is installed: `import vllm` then
reaches it) and gets the project's oracles as `dsv4_kernels`. With the repository on that process's
path, the project's kernels/ shadowed PyPI's and every vLLM check failed in a venv resolved fresh
("cannot import name 'CUDAProperties' from 'kernels'")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _vllm_venvs import ROOT, check_env

CHECKS = Path(__file__).resolve().parent / "checks"


def test_a_check_process_leaves_the_name_kernels_to_pypi(tmp_path):
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("CUDAProperties = 'from PyPI'\n")  # what transformers imports
    env = check_env(None, [CHECKS, site])
    code = ("import _harness, kernels, dsv4_kernels.codecs as oracle; "
            "print(kernels.CUDAProperties); print(oracle.__file__)")
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    pypi, oracle = run.stdout.splitlines()[-2:]
    assert pypi == "from PyPI"
    assert Path(oracle).resolve() == (ROOT / "kernels" / "codecs.py").resolve()
    assert str(ROOT) not in env["PYTHONPATH"].split(":")


def test_python_run_in_the_project_root_gets_pypis_kernels(tmp_path):
    """The README's own check of a built venv runs from the project root: the current folder comes
    first on sys.path there, yet the installed `kernels` must win over the project's folder."""
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("CUDAProperties = 'from PyPI'\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # stands for the venv's site-packages, after '' on sys.path
    run = subprocess.run([sys.executable, "-c", "import kernels; print(kernels.CUDAProperties)"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "from PyPI"


def test_the_oracles_still_import_as_kernels_here():
    from kernels.fp8_ds_mla import naive
    from kernels.nvfp4 import w4a4_expert

    assert Path(naive.__file__).resolve().is_relative_to(ROOT / "kernels")
    assert Path(w4a4_expert.__file__).resolve().is_relative_to(ROOT / "kernels")
