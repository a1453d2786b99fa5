"""Items 2 and 7: `build` removes the CUDA-only add-ons that break the import on CPU, imports every
patched module in the built venv and says so in words; one writer per venv at a time."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from test_build_overlay import PKG, VER, _commit, _wheel, toy  # noqa: F401  (the synthetic wheel fixture)

from dsv4_patch.build import PRUNE, build_overlay, venv_lock, venv_python

JUNK = "dsv4junkvision"


def _junk_wheel(dirpath: Path) -> None:
    """A second distribution, standing in for torchvision: installed, then pruned."""
    import base64
    import hashlib

    dist = f"{JUNK}-1.0.dist-info"
    entries = {f"{JUNK}/__init__.py": "X = 1\n",
               f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {JUNK}\nVersion: 1.0\n",
               f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rec = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
           f"{len(t.encode())}" for n, t in entries.items()] + [f"{dist}/RECORD,,"]
    entries[f"{dist}/RECORD"] = "\n".join(rec) + "\n"
    with zipfile.ZipFile(dirpath / f"{JUNK}-1.0-py3-none-any.whl", "w") as z:
        for n, t in entries.items():
            z.writestr(n, t)


def test_vllm_builds_prune_what_the_harness_prunes():
    assert set(PRUNE["vllm"]) == {"torchvision", "torchaudio", "torchcodec"}


def test_patched_modules_are_imported_and_a_broken_one_fails_the_build(toy, tmp_path):
    base, patched, venv = toy
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'patched'\n",
                      "dsv4toy/new.py": "raise RuntimeError('operator torchvision::nms does not exist')\n"})
    r = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert r.imports == {"dsv4toy.mod": "ok",
                         "dsv4toy.new": "RuntimeError: operator torchvision::nms does not exist"}
    assert not r.imports_ok
    text = "\n".join(r.summary())
    assert "patched modules that import: 1/2" in text and "does not import: dsv4toy.new: RuntimeError" in text
    assert "{" not in text  # words, not a raw dict

    _commit(patched, {"dsv4toy/new.py": "NEW = 1\n"})
    r = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert r.imports_ok and set(r.imports) == {"dsv4toy.mod", "dsv4toy.new"}


def test_prune_removes_the_named_distributions(toy, tmp_path, monkeypatch):
    base, patched, venv = toy
    wheels = Path(__import__("os").environ["PIP_FIND_LINKS"])
    _junk_wheel(wheels)
    build_overlay(base, base, venv, package=PKG, version=VER, python=sys.executable, prune_names=())
    py = venv_python(venv)
    subprocess.run([str(py), "-m", "pip", "install", "-q", JUNK], check=True, capture_output=True)
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'patched'\n"})
    r = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable, prune_names=(JUNK,))
    assert r.pruned == [JUNK] and r.imports_ok
    gone = subprocess.run([str(py), "-c", f"import {JUNK}"], capture_output=True)
    assert gone.returncode != 0


WAITER = """
import sys, time
from pathlib import Path

import pytest
from dsv4_patch.build import build_overlay
base, patched, venv = map(Path, sys.argv[1:4])
build_overlay(base, patched, venv, package="dsv4toy", version="1.0", python=sys.executable)
print("DONE", time.monotonic(), flush=True)
"""


def test_a_second_build_of_the_same_venv_waits_for_the_first(toy, tmp_path):
    base, patched, venv = toy
    build_overlay(base, base, venv, package=PKG, version=VER, python=sys.executable)  # cached from here on
    root = str(Path(__file__).resolve().parents[2])
    with venv_lock(venv):
        child = subprocess.Popen([sys.executable, "-c", WAITER, str(base), str(base), str(venv)],
                                 stdout=subprocess.PIPE, text=True,
                                 env={**__import__("os").environ, "PYTHONPATH": root})
        time.sleep(3)  # a cached build takes well under a second when nothing holds the lock
        assert child.poll() is None, "the second build did not wait for the lock"
        released = time.monotonic()
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and float(out.split()[1]) >= released


@pytest.fixture
def platform_module(monkeypatch):
    """The synthetic release ships a module this machine cannot import at all (as vLLM's
    platforms/rocm.py on a CPU machine): patched or not, it fails."""
    from test_build_overlay import FILES

    monkeypatch.setitem(FILES, "dsv4toy/plat.py", "import dsv4_no_rocm_runtime_here\nPLAT = 'base'\n")


def test_a_module_that_fails_unpatched_too_is_not_a_broken_build(platform_module, toy):
    base, patched, venv = toy
    _commit(patched, {"dsv4toy/plat.py": "import dsv4_no_rocm_runtime_here\nPLAT = 'patched'\n",
                      "dsv4toy/mod.py": "VALUE = 'patched'\n"})
    r = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert r.imports["dsv4toy.mod"] == "ok"
    assert r.imports["dsv4toy.plat"].startswith("does not import here unpatched either: ModuleNotFoundError")
    assert r.imports_ok
    assert "1 cannot be imported on this machine, patched or not" in "\n".join(r.summary())


def test_the_release_is_installed_without_byte_compiling_all_of_it(toy, monkeypatch):
    """pip byte-compiled every installed module (torch, vLLM and their dependencies: most of a cold
    `build vllm --venv`); a module is compiled on its first import instead. (Without the test run's
    byte-code folder, where pip's byte code would otherwise go instead of beside the module.)"""
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    base, patched, venv = toy
    build_overlay(base, base, venv, package=PKG, version=VER, python=sys.executable)
    [pkg] = venv.glob(f"lib/python*/site-packages/{PKG}")
    assert (pkg / "mod.py").is_file()
    assert not list(pkg.rglob("*.pyc")), sorted(p.name for p in pkg.rglob("*.pyc"))
