"""The check-result cache key of the SGLang probes and in-tree test runs (conftest.result_key): each
input it covers, changed alone, gives another key; a tree with local changes gives none."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import _check_cache as C

HERE = Path(__file__).resolve().parent


def _result_key():
    spec = importlib.util.spec_from_file_location("dsv4_sglang_conftest", HERE / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.result_key


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                   check=True, capture_output=True)


def test_key_follows_trees_files_deps_and_switches(tmp_path, monkeypatch):
    result_key = _result_key()
    monkeypatch.setattr(C, "_dists", {})
    tree = tmp_path / "tree"
    (tree / "python").mkdir(parents=True)
    (tree / "python" / "m.py").write_text("x = 1\n")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "one")
    deps = tmp_path / "deps"
    (deps / "transformers-5.0.0.dist-info").mkdir(parents=True)
    (deps / "transformers-5.0.0.dist-info" / "RECORD").write_text("transformers/__init__.py,sha256=A,1\n")
    probe = tmp_path / "probe.py"
    probe.write_text("print(1)\n")
    env = {"SGLANG_DSV4_O_FP8_QDQ_BLOCK": "32", "PROBE_SEED": "1017", "HOME": "/h"}

    def key(**over):
        C._dists.clear()  # a later run
        return result_key("probe", [tree], deps, {**env, **over}, probe)

    k0 = key()
    assert key() == k0
    assert key(SGLANG_DSV4_O_FP8_QDQ_BLOCK="0") != k0
    assert key(PROBE_SEED="1") != k0
    assert key(HOME="/elsewhere") == k0  # nothing a probe reads
    probe.write_text("print(2)\n")
    assert key() != k0
    probe.write_text("print(1)\n")
    assert key() == k0
    (deps / "transformers-5.0.0.dist-info" / "RECORD").write_text("transformers/__init__.py,sha256=B,1\n")
    assert key() != k0
    (deps / "transformers-5.0.0.dist-info" / "RECORD").write_text("transformers/__init__.py,sha256=A,1\n")
    (tree / "python" / "m.py").write_text("x = 2\n")
    assert key() is None  # local changes: never stored
    _git(tree, "commit", "-qam", "two")
    assert key() not in (None, k0)
