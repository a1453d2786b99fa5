"""dsv4_patch.build.build_overlay on a tiny synthetic package (a wheel built here, no network)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dsv4_patch.build import BuildError, build_overlay, changed_files, is_compiled_source, venv_python
from dsv4_patch.errors import Dsv4Error

PKG, VER = "dsv4toy", "1.0"
FILES = {
    "dsv4toy/__init__.py": "from .mod import VALUE\n",
    "dsv4toy/mod.py": "VALUE = 'base'\n",
    "dsv4toy/gone.py": "GONE = True\n",
}


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@x")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _wheel(dirpath: Path) -> Path:
    """A minimal, valid py3-none-any wheel of FILES."""
    dist = f"{PKG}-{VER}.dist-info"
    entries = dict(FILES)
    entries[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {VER}\n"
    entries[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for name, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    entries[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = dirpath / f"{PKG}-{VER}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in entries.items():
            z.writestr(name, text)
    return path


@pytest.fixture()
def toy(tmp_path, monkeypatch, venv_template):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    base = tmp_path / "base"
    for rel, text in FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    (base / "tests").mkdir()
    (base / "tests" / "test_x.py").write_text("def test_x(): pass\n")
    _git(base, "init", "-q")
    _git(base, "add", "-A")
    _git(base, "commit", "-qm", "base")
    patched = tmp_path / "patched"
    _git(tmp_path, "clone", "-q", str(base), str(patched))
    _git(patched, "update-ref", "refs/dsv4/base", "HEAD")
    shutil.copytree(venv_template, tmp_path / "venv", symlinks=True)  # empty, as ensure_venv makes it
    return base, patched, tmp_path / "venv"


def _commit(tree: Path, edits: dict[str, str | None]) -> None:
    for rel, text in edits.items():
        p = tree / rel
        if text is None:
            p.unlink()
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "patch")


def _run(venv: Path, code: str) -> str:
    return subprocess.run([str(venv_python(venv)), "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_overlay_applies_and_is_cached(toy):
    base, patched, venv = toy
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'patched'\n", "dsv4toy/new.py": "NEW = 1\n",
                      "dsv4toy/gone.py": None, "tests/test_x.py": "def test_x(): assert 1\n"})
    assert changed_files(base, patched) == [("D", "dsv4toy/gone.py"), ("M", "dsv4toy/mod.py"),
                                            ("A", "dsv4toy/new.py"), ("M", "tests/test_x.py")]
    r = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert not r.cached
    assert r.overlaid == ["dsv4toy/mod.py"] and r.added == ["dsv4toy/new.py"]
    assert r.removed == ["dsv4toy/gone.py"] and r.skipped == ["tests/test_x.py"]
    out = _run(venv, "import dsv4toy, dsv4toy.new, importlib.util as u; "
                     "print(dsv4toy.VALUE, dsv4toy.new.NEW, u.find_spec('dsv4toy.gone') is None)")
    assert out == "patched 1 True"

    r2 = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert r2.cached and r2.key == r.key

    # a different stack: the previous overlay is undone first (gone.py back, new.py removed)
    _git(patched, "reset", "-q", "--hard", "refs/dsv4/base")
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'second'\n"})
    r3 = build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert not r3.cached and r3.key != r.key
    out = _run(venv, "import dsv4toy, importlib.util as u; "
                     "print(dsv4toy.VALUE, u.find_spec('dsv4toy.gone') is not None, u.find_spec('dsv4toy.new') is None)")
    assert out == "second True True"


def test_refuses_when_installed_file_differs(toy):
    base, patched, venv = toy
    build_overlay(base, base, venv, package=PKG, version=VER, python=sys.executable)  # plain install
    site = Path(_run(venv, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (site / "dsv4toy" / "mod.py").write_text("VALUE = 'someone else'\n")
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'patched'\n"})
    with pytest.raises(BuildError) as e:
        build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    msg = e.value.one_line()
    assert "dsv4toy/mod.py" in msg and "\n" not in msg
    assert (site / "dsv4toy" / "mod.py").read_text() == "VALUE = 'someone else'\n"  # untouched


@pytest.mark.parametrize("path", ["csrc/rocm/skinny.cu", "csrc/x.h", "kernels/a.cuh", "a/b.hip",
                                  "src/k.cpp", "CMakeLists.txt", "cmake/utils.cmake"])
def test_refuses_compiled_source_change(toy, path):
    base, patched, _ = toy
    venv = patched.parent / "not-made-yet"
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'patched'\n", path: "// changed\n"})
    with pytest.raises(Dsv4Error) as e:
        build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    assert path in e.value.one_line() and "--from-source" in e.value.one_line()
    assert not venv.exists()  # refused before any install


def test_compiled_source_patterns():
    assert is_compiled_source("csrc/rocm/skinny_gemms.cu")
    assert is_compiled_source("CMakeLists.txt") and is_compiled_source("cmake/external_projects/deepgemm.cmake")
    assert not is_compiled_source("vllm/platforms/rocm.py")
    assert not is_compiled_source("vllm/model_executor/layers/utils.py")


def test_directory_trees_without_git(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "p").mkdir(parents=True)
    (b / "p").mkdir(parents=True)
    (a / "p" / "x.py").write_text("1")
    (b / "p" / "x.py").write_text("2")
    (a / "p" / "same.py").write_text("s")
    (b / "p" / "same.py").write_text("s")
    (b / "p" / "y.py").write_text("y")
    assert changed_files(a, b) == [("M", "p/x.py"), ("A", "p/y.py")]


def test_refuses_to_restore_from_a_base_tree_of_another_release(toy, tmp_path):
    base, patched, venv = toy
    _commit(patched, {"dsv4toy/mod.py": "VALUE = 'patched'\n"})
    build_overlay(base, patched, venv, package=PKG, version=VER, python=sys.executable)
    # a base tree of another release (its mod.py differs) must not be used to undo the overlay
    other = tmp_path / "other-release"
    shutil.copytree(base, other)
    (other / "dsv4toy" / "mod.py").write_text("VALUE = 'next release'\n")
    with pytest.raises(BuildError, match="not the base this venv was overlaid from"):
        build_overlay(other, other, venv, package=PKG, version=VER, python=sys.executable)
    assert _run(venv, "import dsv4toy; print(dsv4toy.VALUE)") == "patched"  # nothing mixed in
