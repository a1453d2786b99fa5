"""The venv the `upstream-ci` level runs a stack's in-tree tests in (dsv4_patch/upstream_ci.py loads
this file by path: `test_env(cfg, base_tree, pristine)`).

vLLM: the integration level's CPU venv of the release (tests/regress/vllm/_vllm_venvs.py,
`base_venv_for`: the release's wheel with its CPU dependencies, or a clone of the donor release's
venv where the release pins a torch this machine cannot install). The tree under test comes first on
sys.path (as an editable install of the upstream puts it), so the venv supplies the release's
dependencies and the tree its Python sources. The in-tree tests run as on a ROCm machine
(dsv4_upstream_ci_rocm: the stand-in amdsmi the regression checks use, reporting gfx942) with CPU
torch, without the upstream's tests/conftest.py (its autouse fixtures free CUDA memory and fail on a
CPU); a test that needs a GPU kernel then fails with a CUDA error, which the level reports as not
runnable here. Other stacks: a reason string (not runnable).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
VLLM = TESTS / "regress" / "vllm"
# What the venvs and the test path below are made of, besides this folder: dsv4_patch/upstream_ci.py
# keys its stored results by these files (and the test code they import), so an edit to any of them
# runs the in-tree tests again.
READS = (HERE / "plugins", VLLM / "_vllm_venvs.py", VLLM / "checks" / "_fake_amdsmi.py")


def test_env(cfg, base_tree: Path, pristine: Callable[[str | None], Path]):
    from dsv4_patch.build import venv_python
    from dsv4_patch.upstream_ci import PytestEnv

    if cfg.name != "vllm":
        return f"no venv recipe for {cfg.name}'s in-tree tests in this project"
    for p in (TESTS, VLLM):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    from _vllm_venvs import base_venv_for  # the integration level's recipe (one small function)

    venv = base_venv_for(Path(base_tree), lambda: pristine(None))
    return PytestEnv(python=venv_python(venv), pythonpath=[HERE / "plugins", VLLM / "checks"],
                   plugins=["dsv4_upstream_ci_rocm"], args=["--noconftest", "-W", "ignore::DeprecationWarning"],
                   note="ROCm (gfx942) on CPU torch, upstream conftest not loaded")
