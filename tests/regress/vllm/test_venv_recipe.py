"""The CPU recipe of the vLLM base venvs (_vllm_venvs.py): the release's declared dependencies but
the GPU-only ones, read from its metadata; venvs of another recipe live in another folder; an
install that did not finish is not taken for a finished one, and one that fails leaves nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

import _vllm_venvs as V

METADATA = """\
Metadata-Version: 2.1
Name: fakevllm
Version: 1.0
Requires-Dist: regex
Requires-Dist: mistral_common[image]>=1.11.6
Requires-Dist: llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: never-here; platform_system == "NoSuchOS"
Requires-Dist: torch==2.13.0
Requires-Dist: torchvision==0.28.0
Requires-Dist: PyNvVideoCodec==2.0.4
Requires-Dist: flashinfer_python==0.6.16.post3
Requires-Dist: nvidia-cutlass-dsl[cu13]==4.6.0
Requires-Dist: pytest; extra == "test"
"""


def test_declared_dependencies_leave_out_the_gpu_only_ones_extras_and_other_platforms(tmp_path, monkeypatch):
    import platform

    info = tmp_path / "fakevllm-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA)
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")  # not handed on: the venv's own metadata decides
    # found the way an installed distribution is: on the interpreter's path
    monkeypatch.setattr(V, "DECLARED", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + V.DECLARED)
    got = V.declared_dependencies(sys.executable, "fakevllm", V.GPU_ONLY + ("torch",))
    want = ["regex", "mistral_common[image]>=1.11.6"]
    if platform.machine() in ("x86_64", "aarch64"):
        want.append("llguidance<1.8.0,>=1.7.0")
    assert got == want


def test_another_recipe_lives_in_another_folder(monkeypatch):
    here = V.release_root("0.27.1")
    monkeypatch.setenv("DSV4_BUILD_TORCH", "2.0.0")
    assert V.release_root("0.27.1") != here
    assert here.name.startswith("vllm-0.27.1-cpu-") and here.name != "vllm-0.27.1"  # not the full install's


def test_an_unfinished_install_is_removed_before_installing(tmp_path, monkeypatch, venv_template):
    import shutil

    venv = tmp_path / "base"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")  # what a killed install leaves: no recipe file
    (venv / "half-written").write_text("")
    made = []

    def new_venv(path, python):  # a copy of an empty venv (this test is not about making one)
        made.append(path.exists())
        shutil.copytree(venv_template, path, symlinks=True)
        return V.venv_python(path)

    monkeypatch.setattr(V, "ensure_venv", new_venv)
    monkeypatch.setenv("DSV4_BUILD_TORCH", "not-a-version")  # pip then refuses the first requirement
    with pytest.raises(subprocess.CalledProcessError):
        V.install_cpu_release(venv, "0.27.1")
    assert made == [False]  # the leftover went before the new venv was made
    assert not venv.exists()  # and the failed install's venv after


def test_a_finished_install_is_kept(tmp_path):
    venv = tmp_path / "base"
    venv.mkdir()
    (venv / V.RECIPE_FILE).write_text(V._recipe())
    (venv / "kept").write_text("")
    V.install_cpu_release(venv, "0.27.1")  # nothing to do: no pip run
    assert (venv / "kept").exists()


def test_gpu_only_names_are_normalized_distribution_names():
    """The filter compares PEP 503 normalized names: an entry spelled otherwise would never match."""
    import re

    assert all(n == re.sub(r"[-_.]+", "-", n).lower() for n in V.GPU_ONLY)


def test_byte_code_is_compiled_beside_the_sources_once_and_read_where_none_is_written(tmp_path, venv_template,
                                                                                     monkeypatch):
    import shutil

    venv = tmp_path / "base"
    shutil.copytree(venv_template, venv, symlinks=True, ignore=shutil.ignore_patterns("pip", "pip-*"))
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "mod_a.py").write_text("X = 1\n")
    # the test run's own settings: byte code in the run's folder, or none at all
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "run-pycache"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    V.ensure_bytecode(venv)
    assert list((site / "__pycache__").glob("mod_a.*.pyc"))
    assert not (tmp_path / "run-pycache").exists()
    # a check's interpreter (writes none) loads it from there
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPYCACHEPREFIX"}
    p = subprocess.run([str(V.venv_python(venv)), "-v", "-c", "import mod_a"], capture_output=True, text=True, env=env)
    assert f"code object from '{site / '__pycache__'}/mod_a." in p.stderr, p.stderr[-2000:]
    # once: a module added later is not compiled by a second call
    (site / "mod_b.py").write_text("Y = 2\n")
    V.ensure_bytecode(venv)
    assert not list((site / "__pycache__").glob("mod_b.*.pyc"))


def _tree(tmp_path, name: str, *, build_torch: str | None = None, cuda: str = "") -> "Path":
    from pathlib import Path

    t = Path(tmp_path) / name
    (t / "requirements").mkdir(parents=True)
    if build_torch is not None:
        (t / "pyproject.toml").write_text('[build-system]\nrequires = ["cmake>=3.26.1", "ninja", '
                                          f'"torch == {build_torch}", "wheel"]\n')
    (t / "requirements" / "cuda.txt").write_text(cuda)
    return t


def test_the_recipe_follows_the_torch_the_tree_pins(tmp_path, monkeypatch):
    """Read from the tree, never from a version: the build requirement first, else requirements/cuda.txt."""
    monkeypatch.delenv("DSV4_BUILD_TORCH", raising=False)
    cpu = V._torch_pin()
    same = _tree(tmp_path, "same", build_torch=cpu, cuda="torch==9.9.9\n")
    other = _tree(tmp_path, "other", build_torch="99.0.0")
    only_reqs = _tree(tmp_path, "reqs", cuda=f"# comment\ntorchaudio==1.0\ntorch=={cpu}\n")
    only_reqs_other = _tree(tmp_path, "reqs-other", cuda="torch==99.0.0 # the CUDA build\n")
    assert [V.tree_torch_pin(t) for t in (same, other, only_reqs, only_reqs_other)] == [cpu, "99.0.0", cpu, "99.0.0"]
    assert [V.needs_substitute_torch(t) for t in (same, other, only_reqs, only_reqs_other)] == [False, True, False, True]
    assert V.tree_torch_pin(_tree(tmp_path, "none")) is None and V.needs_substitute_torch(_tree(tmp_path, "none2"))
    monkeypatch.setenv("DSV4_BUILD_TORCH", "")  # "take the release's torch": never a substitute
    assert not V.needs_substitute_torch(other)


def test_substitute_extras_are_the_declared_pins(tmp_path):
    t = _tree(tmp_path, "t", build_torch="99.0.0",
              cuda="humming-kernels[cu13]==0.1.19 ; platform_system == 'Linux'\nflashinfer-python==0.7.3\n")
    assert V.substitute_extras(t) == ["humming-kernels==0.1.19"]
    assert V.substitute_extras(_tree(tmp_path, "u", build_torch="99.0.0")) == []


def test_each_release_and_recipe_has_its_own_venv_folder():
    """The folder (and so the venvs' stamps and the check-result keys) names the release and the recipe."""
    a, b = V.release_root("1.0.0"), V.release_root("1.1.0")
    s1 = V.release_root("1.1.0", {"donor": "1.0.0", "extras": []})
    s2 = V.release_root("1.1.0", {"donor": "1.0.0", "extras": ["humming-kernels==0.1.19"]})
    s3 = V.release_root("1.1.0", {"donor": "0.9.0", "extras": []})
    assert len({a, b, s1, s2, s3}) == 5
    assert all(p.name.startswith(f"vllm-{v}-cpu-") for p, v in ((a, "1.0.0"), (b, "1.1.0"), (s1, "1.1.0")))
