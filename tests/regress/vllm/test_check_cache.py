"""The check-result cache (tests/_check_cache.py; the vLLM checks' key in _vllm_venvs.py; tests/conftest.py
picks its folder):
a stored result is read back only for the very same computation. Every input the key claims to
cover is changed here one at a time and must give another key; inputs it must not see (an unrelated
variable, another tree for a check that reads none) must not."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import _check_cache as C
import _vllm_venvs as V

ROOT = Path(__file__).resolve().parents[3]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A repo root with a check folder, a stamped venv with one distribution, and a clean git tree."""
    checks = tmp_path / "repo" / "checks"
    checks.mkdir(parents=True)
    (checks / "c.py").write_text("import _helper\nimport os\nSEED = os.environ['DSV4_SEED']\n"
                                 "TREE = os.environ['DSV4_TREE_VLLM']\n")
    (checks / "_helper.py").write_text("X = 1\n")
    (checks / "plain.py").write_text("print('reads no tree')\n")
    monkeypatch.setattr(V, "ROOT", tmp_path / "repo")
    monkeypatch.setattr(V, "_SOURCES", (checks,))
    monkeypatch.setattr(C, "_sources", {})
    monkeypatch.setattr(C, "_dists", {})
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.13.0.dist-info").mkdir(parents=True)
    (site / "torch-2.13.0.dist-info" / "RECORD").write_text("torch/__init__.py,sha256=AAAA,10\n")
    (venv / "pyvenv.cfg").write_text("home = /x\nversion = 3.11.7\n")
    (venv / V.STAMP).write_text(json.dumps({"key": "overlay-1", "mode": "overlay", "package": "vllm",
                                            "version": "0.27.1", "installed_version": "0.27.1", "pruned": []}))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.py").write_text("a = 1\n")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "one")
    env = {"DSV4_SEED": "7", "HOME": "/home/x", "UNRELATED": "1"}

    def key(script: str = "c.py", env_over: dict | None = None) -> str | None:
        C._sources.clear()  # a new run: the sources are hashed again
        return V._memo_key(venv, venv, tree, checks / script, [checks], {**env, **(env_over or {})})

    return SimpleNamespace(checks=checks, venv=venv, site=site, tree=tree, key=key)


def _changes(world, change, *, script: str = "c.py", env_over: dict | None = None) -> bool:
    before = world.key(script)
    assert before is not None
    change()
    C._dists.clear()  # as a later run sees it
    after = world.key(script, env_over)
    return after != before


def test_key_follows_every_input(world):
    w = world
    assert w.key() == w.key()  # deterministic
    edits = {
        "a RECORD byte (another build of the same version)":
            lambda: (w.site / "torch-2.13.0.dist-info" / "RECORD").write_text("torch/__init__.py,sha256=AAAB,10\n"),
        "another distribution version":
            lambda: os.rename(w.site / "torch-2.13.0.dist-info", w.site / "torch-2.13.1.dist-info"),
        "another Python": lambda: (w.venv / "pyvenv.cfg").write_text("home = /x\nversion = 3.11.8\n"),
        "another overlay": lambda: (w.venv / V.STAMP).write_text(
            (w.venv / V.STAMP).read_text().replace("overlay-1", "overlay-2")),
        "the script": lambda: (w.checks / "c.py").write_text((w.checks / "c.py").read_text() + "# more\n"),
        "a module it imports": lambda: (w.checks / "_helper.py").write_text("X = 2\n"),
        "the tree it reads": lambda: ((w.tree / "f.py").write_text("a = 2\n"), _git(w.tree, "commit", "-qam", "two")),
    }
    for what, change in edits.items():
        assert _changes(w, change), f"{what} did not change the key"
    assert _changes(w, lambda: None, env_over={"DSV4_SEED": "8"}), "a DSV4_ variable the script reads"
    assert _changes(w, lambda: None, env_over={"VLLM_USE_V2": "1"}), "a variable vLLM reads"
    assert _changes(w, lambda: None, env_over={"OMP_NUM_THREADS": "1"}), "a BLAS thread variable"
    assert not _changes(w, lambda: None, env_over={"UNRELATED": "2"}), "a variable nothing reads"
    (record,) = w.site.glob("torch-*.dist-info/RECORD")  # renamed above
    record.write_text(record.read_text() + "../../../bin/torchrun,sha256=SHEBANG1,99\n")
    assert not _changes(w, lambda: record.write_text(record.read_text().replace("SHEBANG1", "SHEBANG2"))), \
        "a console script (its shebang names the venv's path: the same wheels elsewhere are the same)"
    assert not _changes(w, lambda: record.write_text(record.read_text() + "torch/__pycache__/__init__.cpython-311.pyc,,\n")), \
        "byte code pip compiled (or did not, with --no-compile)"


def test_a_check_that_reads_no_tree_is_not_keyed_by_it(world):
    w = world
    assert not _changes(w, lambda: ((w.tree / "f.py").write_text("a = 3\n"), _git(w.tree, "commit", "-qam", "3")),
                        script="plain.py")


def test_what_cannot_be_named_is_never_stored(world):
    w = world
    (w.tree / "f.py").write_text("a = local edit\n")
    assert w.key() is None  # a tree with local changes
    _git(w.tree, "checkout", "-q", "f.py")
    (w.venv / V.STAMP).unlink()
    C._dists.clear()
    assert w.key() is None  # an unstamped venv
    outside = w.checks.parent / "elsewhere.py"
    outside.write_text("x = 1\n")
    assert V._memo_key(w.venv, w.venv, w.tree, outside, [w.checks], {}) is None  # not in the hashed sources


def _counting():
    calls = []

    def compute():
        calls.append(1)
        return {"sub": {"ok": len(calls) == 1, "error": f"call {len(calls)}"}}

    return calls, compute


def test_a_result_is_read_back_by_a_later_run_and_a_torn_one_recomputed(tmp_path, monkeypatch):
    memo = tmp_path / "check-results"
    memo.mkdir()
    monkeypatch.setenv(C.MEMO_ENV, str(memo))
    calls, compute = _counting()
    first = C.memoized("k" * 64, "c patched", compute)
    again = C.memoized("k" * 64, "c patched", compute)
    assert calls == [1] and again == first == {"sub": {"ok": True, "error": "call 1"}}
    entry = json.loads((memo / f"{'k' * 64}.json").read_text())
    assert entry["what"] == "c patched" and entry["computed"]
    assert "hit " in (memo / "log").read_text()
    (memo / f"{'k' * 64}.json").write_text('{"format": 2, "result": ')  # torn (a killed writer)
    assert C.memoized("k" * 64, "c patched", compute) == {"sub": {"ok": False, "error": "call 2"}}
    assert json.loads((memo / f"{'k' * 64}.json").read_text())["result"]["sub"]["error"] == "call 2"
    other = C.memoized("j" * 64, "c pristine", compute)
    assert other["sub"]["error"] == "call 3"  # another key is another computation


def test_off_and_no_key_always_compute(tmp_path, monkeypatch):
    calls, compute = _counting()
    monkeypatch.setenv(C.MEMO_ENV, "0")
    C.memoized("k" * 64, "c", compute)
    C.memoized("k" * 64, "c", compute)
    monkeypatch.setenv(C.MEMO_ENV, str(tmp_path))
    C.memoized(None, "c", compute)
    C.memoized(None, "c", compute)
    assert len(calls) == 4 and not list(tmp_path.glob("*.json"))


def _conftest():
    spec = importlib.util.spec_from_file_location("dsv4_root_conftest", ROOT / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("setting", ["", "run", "0", "custom"])
def test_the_run_picks_the_cache_folder(tmp_path, monkeypatch, setting):
    mod = _conftest()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(mod.RUN_DIR_ENV, str(run_dir))
    value = str(tmp_path / "mine") if setting == "custom" else setting
    monkeypatch.setenv(C.MEMO_ENV, value)
    config = SimpleNamespace()
    mod.pytest_configure(config)
    want = {"": tmp_path / "cache" / "check-results", "run": run_dir / "checks", "0": None,
            "custom": tmp_path / "mine"}[setting]
    got = os.environ.get(C.MEMO_ENV)
    if want is None:
        assert got == "0"
    else:
        assert Path(got) == want and want.is_dir()
    mod.pytest_unconfigure(config)
    if setting == "":
        assert C.MEMO_ENV not in os.environ  # the default is the run's, not left to what runs after


def test_results_unused_for_a_month_are_pruned(tmp_path, monkeypatch):
    mod = _conftest()
    memo = tmp_path / "cache" / "check-results"
    memo.mkdir(parents=True)
    old, new, lock = memo / ("a" * 64 + ".json"), memo / ("b" * 64 + ".json"), memo / f".{'a' * 64}.lock"
    for f in (old, new, lock):
        f.write_text("{}")
    month = time.time() - 31 * 86400
    os.utime(old, (month, month))
    os.utime(lock, (month, month))
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(C.MEMO_ENV, raising=False)
    monkeypatch.setenv(mod.RUN_DIR_ENV, str(tmp_path))
    config = SimpleNamespace()
    mod.pytest_configure(config)
    mod.pytest_unconfigure(config)
    assert not old.exists() and not lock.exists() and new.exists()
