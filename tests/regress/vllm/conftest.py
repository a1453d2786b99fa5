"""Fixtures for the vLLM regression tests (integration level).

The patched upstream modules are imported from an install of the pinned release (its wheel from
PyPI with the dependencies it declares but the GPU-only ones: _vllm_venvs.py, GPU_ONLY) with the
stack's patched Python files overlaid by dsv4_patch.build.build_overlay, and exercised on CPU. The
venvs live in a cache outside the repo (DSV4_VENV_CACHE, default ~/.cache/dsv4-patch/venvs):

    vllm-0.27.1-cpu-<recipe>/base             the release as the CPU recipe installs it (no overlay)
    vllm-0.27.1-cpu-<recipe>/patched-<key>    a hard-link clone of base with the patched files overlaid

The first run installs once (a few minutes); later runs reuse both (build_overlay's stamp).

The shared machinery is in _vllm_venvs.py. `vllm_check(name, patched=True)` runs
tests/regress/vllm/checks/<name>.py inside one venv, once
per session, and returns its JSON: {sub-check: {"ok": bool, "error": str}}. Each check script is
the same code for the patched and the unpatched tree; the tests expect it to pass on the first and
fail on the second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _vllm_venvs import check_runner, overlay_pair, release_version

CHECKS = Path(__file__).resolve().parent / "checks"
VERSION = "0.27.1"  # the pin; installed from its wheel beside CPU torch 2.13.0 (the CPU recipe)


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
    return overlay_pair(base_tree, patched_tree, VERSION)


@pytest.fixture(scope="session")
def vllm_check(vllm_venvs, dsv4_tree):
    return check_runner(vllm_venvs, [CHECKS], dsv4_tree("vllm"))
