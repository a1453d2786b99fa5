"""One cache variable moves every cache (issue 26): DSV4_PATCH_CACHE (else XDG_CACHE_HOME) moves the
tests' overlay venvs with the imports, archives and check results; DSV4_VENV_CACHE still wins."""

from __future__ import annotations

import sys
from pathlib import Path

from dsv4_patch.regress import venv_cache_root
from dsv4_patch.sources import Cache

VLLM_TESTS = Path(__file__).resolve().parents[1] / "regress" / "vllm"


def test_the_venv_cache_follows_the_tool_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("DSV4_VENV_CACHE", raising=False)
    monkeypatch.delenv("DSV4_PATCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert venv_cache_root() == tmp_path / "xdg/dsv4-patch/venvs" == Cache.default().root / "venvs"
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(tmp_path / "tool"))
    assert venv_cache_root() == tmp_path / "tool/venvs"
    monkeypatch.syspath_prepend(str(VLLM_TESTS))
    monkeypatch.syspath_prepend(str(VLLM_TESTS.parents[1]))  # tests/: _check_cache
    sys.modules.pop("_vllm_venvs", None)
    import _vllm_venvs

    assert _vllm_venvs.venv_cache() == tmp_path / "tool/venvs"  # the vLLM tests' venvs move with it
    monkeypatch.setenv("DSV4_VENV_CACHE", str(tmp_path / "own"))
    assert venv_cache_root() == _vllm_venvs.venv_cache() == tmp_path / "own"
