"""The CPU recipe of the vLLM base venvs (_vllm_venvs.py): a cached venv made by another recipe is
removed with the clones made from it, one made by this recipe is kept, and an install that fails
leaves no venv behind for the next run to mistake for a finished one."""

from __future__ import annotations

import subprocess

import pytest

import _vllm_venvs as V


def _fake_venv(path, marker: str | None):
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    if marker is not None:
        (path / V.RECIPE_FILE).write_text(marker)


@pytest.mark.parametrize("marker", [None, "{\"gpu_only\": [], \"torch\": \"2.0\"}"], ids=["full-install", "older-recipe"])
def test_a_base_of_another_recipe_is_removed_with_its_clones(tmp_path, marker):
    root = tmp_path / "vllm-0.27.1"
    _fake_venv(root / "base", marker)
    _fake_venv(root / "patched-0123456789abcdef", marker)
    V.current_recipe(root)
    assert not (root / "base").exists() and not (root / "patched-0123456789abcdef").exists()


def test_a_base_of_this_recipe_is_kept(tmp_path):
    root = tmp_path / "vllm-0.27.1"
    _fake_venv(root / "base", V._recipe())
    _fake_venv(root / "patched-0123456789abcdef", V._recipe())
    V.current_recipe(root)
    assert (root / "base" / "bin" / "python").exists() and (root / "patched-0123456789abcdef").exists()


def test_a_failed_install_leaves_no_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("DSV4_BUILD_TORCH", "not-a-version")  # pip refuses the requirement at once
    venv = tmp_path / "base"
    with pytest.raises(subprocess.CalledProcessError):
        V.install_cpu_release(venv, "0.27.1")
    assert not venv.exists()


def test_gpu_only_names_are_normalized_distribution_names():
    """The filter compares PEP 503 normalized names: an entry spelled otherwise would never match."""
    import re

    assert all(n == re.sub(r"[-_.]+", "-", n).lower() for n in V.GPU_ONLY)
