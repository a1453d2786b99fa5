"""`status --matrix` says when a test-level pass is older than the test code it covers (testcode.py):
a result that recorded the test code's fingerprint goes `stale-tests` when a covered file's bytes
change; an older result without one, when git has a commit to a covered file after the result's date
(or the file has uncommitted changes). The apply level and other patches' test code are not involved."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dsv4_patch.e2e.matrix import compute_matrix
from dsv4_patch.e2e.record import make_result, write_result
from dsv4_patch.e2e.testcode import fingerprint, files_of_tests

STACKS = """
[stacks.vllm]
upstream = "https://github.com/vllm-project/vllm"
commit = "6e448d0ea"
patches = "vllm"
[[stacks.vllm.sources]]
kind = "path"
path = "/nowhere"
"""

PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A Person <a@example.com>
Date: Tue, 1 Dec 2026 10:00:00 +0000
Subject: [PATCH] {subject}

Why.

Regression-Test: {test}
---
 a.py | 1 +
 1 file changed, 1 insertion(+)

diff --git a/a.py b/a.py
index 0000000..1111111 100644
--- a/a.py
+++ b/a.py
@@ -1 +1,2 @@
 x = 1
+y = 2
--
2.43.0
"""

TEST_A = "tests/regress/vllm/test_a_gpu.py"
TEST_B = "tests/regress/vllm/test_b.py"


def _git(root: Path, *args: str, date: str | None = None) -> None:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path):
    d = tmp_path / "patches" / "vllm"
    d.mkdir(parents=True)
    (tmp_path / "patches" / "stacks.toml").write_text(STACKS)
    (d / "0001-a.patch").write_text(PATCH.format(subject="a", test=TEST_A + "::test_on_gpu"))
    (d / "0002-b.patch").write_text(PATCH.format(subject="b", test=TEST_B + "::test_cpu"))
    (d / "series").write_text("0001-a.patch\n0002-b.patch\n")
    t = tmp_path / "tests" / "regress" / "vllm"
    t.mkdir(parents=True)
    (tmp_path / "tests" / "conftest.py").write_text("# root fixtures\n")
    (t / "conftest.py").write_text("# vllm fixtures\n")
    (t / "_gate.py").write_text("GPU = True\n")
    (t / "test_a_gpu.py").write_text("def test_on_gpu(): pass\n")
    (t / "test_b.py").write_text("def test_cpu(): pass\n")
    (t / "unrelated.txt").write_text("not python\n")
    return tmp_path


def _record(project: Path, level: str, hw: str, date: str, tests: dict | None) -> None:
    d = project / "patches" / "vllm"
    write_result(d, make_result("vllm", d, level, hw, True, {}, date=date, tests=tests))


def _cells(project: Path) -> dict[tuple[str, str], tuple[str, list[str]]]:
    [m] = compute_matrix(project)
    return {(r.name, c.level): (c.status, c.changed_tests) for r in m.rows for c in r.cells}


def test_test_code_is_the_module_its_folder_helpers_and_the_conftests_above(project):
    assert files_of_tests(project, [TEST_A + "::test_on_gpu", "tests/gone.py::test_x"]) == [
        "tests/conftest.py", "tests/regress/vllm/_gate.py", "tests/regress/vllm/conftest.py", TEST_A]


def test_a_fingerprinted_pass_goes_stale_when_its_test_code_changes(project):
    files = files_of_tests(project, [TEST_A, TEST_B])
    _record(project, "gpu", "H200", "2026-12-01T10:00:00+00:00", fingerprint(project, files))
    _record(project, "apply", "cpu", "2026-12-01T10:00:00+00:00", None)
    assert _cells(project)[("0001-a.patch", "gpu")] == ("passed", [])

    (project / "tests" / "regress" / "vllm" / "_gate.py").write_text("GPU = False  # the gate moved\n")
    cells = _cells(project)
    assert cells[("0001-a.patch", "gpu")] == ("stale-tests", ["tests/regress/vllm/_gate.py"])
    assert cells[("0001-a.patch", "apply")] == ("passed", [])  # apply runs no bound test

    (project / "tests" / "regress" / "vllm" / "_gate.py").write_text("GPU = True\n")  # put back: passes again
    (project / TEST_B).write_text("def test_cpu(): assert False\n")  # patch b's test: not patch a's
    cells = _cells(project)
    assert cells[("0001-a.patch", "gpu")] == ("passed", [])
    assert cells[("0002-b.patch", "gpu")] == ("stale-tests", [TEST_B])


def test_a_new_helper_the_record_never_saw_makes_it_stale(project):
    _record(project, "gpu", "H200", "2026-12-01T10:00:00+00:00",
            fingerprint(project, files_of_tests(project, [TEST_A])))
    (project / "tests" / "regress" / "vllm" / "_new_gate.py").write_text("x = 1\n")
    assert _cells(project)[("0001-a.patch", "gpu")] == ("stale-tests", ["tests/regress/vllm/_new_gate.py"])


def test_an_older_result_is_judged_by_the_commits_after_its_date(project):
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "tests", date="2026-11-30T09:00:00+00:00")
    _record(project, "gpu", "H200", "2026-12-01T10:00:00+00:00", None)  # no fingerprint: written before it existed
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "result", date="2026-12-01T11:00:00+00:00")
    assert _cells(project)[("0001-a.patch", "gpu")] == ("passed", [])

    (project / TEST_A).write_text("def test_on_gpu(): assert 1\n")
    assert _cells(project)[("0001-a.patch", "gpu")] == ("stale-tests", [TEST_A])  # uncommitted edit
    _git(project, "commit", "-qam", "edit the GPU test", date="2026-12-02T09:00:00+00:00")
    assert _cells(project)[("0001-a.patch", "gpu")] == ("stale-tests", [TEST_A])  # committed after the run
    assert _cells(project)[("0002-b.patch", "gpu")] == ("passed", [])


def test_test_code_reaches_the_check_scripts_the_oracles_and_imported_test_modules(project):
    """What a bound test runs without naming a file: the check scripts it names (checks/<name>.py),
    the kernels/ oracles they import (as `dsv4_kernels`, or as `kernels`), a test module another
    imports. Product code (dsv4_patch/) is not test code."""
    t = project / "tests" / "regress" / "vllm"
    (t / "checks").mkdir()
    (t / "checks" / "_harness.py").write_text("import os\nimport dsv4_kernels.codecs\n")
    (t / "checks" / "reader.py").write_text("from _harness import check\n")
    (project / "kernels" / "oracle").mkdir(parents=True)
    (project / "kernels" / "codecs.py").write_text("E4M3 = 1\n")
    (project / "kernels" / "oracle" / "__init__.py").write_text("")
    (project / "kernels" / "oracle" / "naive.py").write_text("def ref(): return 1\n")
    (project / "kernels" / "bench.py").write_text("# imported by nothing\n")
    (project / "dsv4_patch").mkdir()
    (project / "dsv4_patch" / "build.py").write_text("x = 1\n")
    (t / TEST_B.rsplit("/", 1)[1]).write_text(
        "from kernels.oracle.naive import ref\nfrom dsv4_patch.build import x\n\ndef test_cpu(): assert ref()\n")
    (t / "checks" / "other.py").write_text("# a check no test of patch a names\n")
    (project / TEST_A).write_text('from test_b import ref  # noqa\n\nCHECK = "reader"\n\ndef test_on_gpu(): pass\n')

    files = files_of_tests(project, [TEST_A + "::test_on_gpu"])
    assert files == ["kernels/codecs.py", "kernels/oracle/__init__.py", "kernels/oracle/naive.py",
                     "tests/conftest.py", "tests/regress/vllm/_gate.py", "tests/regress/vllm/checks/_harness.py",
                     "tests/regress/vllm/checks/reader.py", "tests/regress/vllm/conftest.py", TEST_A, TEST_B]

    _record(project, "gpu", "H200", "2026-12-01T10:00:00+00:00", fingerprint(project, files))
    assert _cells(project)[("0001-a.patch", "gpu")] == ("passed", [])
    for rel, edit in (("tests/regress/vllm/checks/reader.py", "from _harness import check  # changed\n"),
                      ("kernels/codecs.py", "E4M3 = 2\n"),
                      ("kernels/oracle/naive.py", "def ref(): return 0\n"),
                      (TEST_B, "def test_cpu(): pass\n")):
        before = (project / rel).read_text()
        (project / rel).write_text(edit)
        assert _cells(project)[("0001-a.patch", "gpu")] == ("stale-tests", [rel]), rel
        (project / rel).write_text(before)
    (project / "dsv4_patch" / "build.py").write_text("x = 2\n")  # the engine: not the test code
    (project / "kernels" / "bench.py").write_text("# edited\n")  # kernels/ that no test code imports
    (t / "checks" / "other.py").write_text("# edited\n")  # a check script the tests do not name
    assert _cells(project)[("0001-a.patch", "gpu")] == ("passed", [])


def test_a_result_recorded_at_another_pin_is_stale(project):
    d = project / "patches" / "vllm"
    write_result(d, make_result("vllm", d, "apply", "cpu", True, {}, date="2026-12-01T10:00:00+00:00",
                                pin="6e448d0ea"))
    write_result(d, make_result("vllm", d, "gpu", "H200", True, {}, date="2026-12-01T10:00:00+00:00",
                                tests=fingerprint(project, files_of_tests(project, [TEST_A])), pin="6e448d0ea"))
    assert _cells(project)[("0001-a.patch", "apply")] == ("passed", [])
    assert _cells(project)[("0001-a.patch", "gpu")] == ("passed", [])
    stacks = project / "patches" / "stacks.toml"
    stacks.write_text(STACKS.replace('commit = "6e448d0ea"', 'commit = "1234567890"'))  # a pin move: same patch bytes
    assert _cells(project)[("0001-a.patch", "apply")] == ("stale", [])
    assert _cells(project)[("0001-a.patch", "gpu")] == ("stale", [])
    stacks.write_text(STACKS)
    assert _cells(project)[("0001-a.patch", "gpu")] == ("passed", [])


def test_a_pin_spelled_in_full_is_the_same_pin():
    from dsv4_patch.e2e.matrix import same_pin

    assert same_pin("6e448d0ea", "6e448d0ea1234567890abcdef1234567890abcde")
    assert same_pin("6e448d0ea1234567890abcdef1234567890abcde", "6e448d0ea")
    assert not same_pin("6e448d0ea", "6e448d0eb1234567890abcdef1234567890abcde")
    assert not same_pin("v0.5.23", "v0.5.2")  # tags: only equal
    assert same_pin("v0.5.23", "v0.5.23")


def test_imports_resolve_as_python_resolves_them(tmp_path):
    """Relative imports from a package, a package that wins over a module of the same name, and the
    alias of kernels/ resolved against the root even where a tests/kernels/ folder is nearer."""
    (tmp_path / "kernels" / "fp8").mkdir(parents=True)
    (tmp_path / "kernels" / "codecs.py").write_text("")
    (tmp_path / "kernels" / "fp8" / "__init__.py").write_text("")
    (tmp_path / "kernels" / "fp8" / "layout.py").write_text("from ..codecs import e4m3\n")
    (tmp_path / "kernels" / "fp8" / "naive.py").write_text("from . import layout as L\n")
    t = tmp_path / "tests" / "kernels"
    t.mkdir(parents=True)
    (t / "codecs.py").write_text("# a test helper that shares the oracle's name\n")
    (t / "shadow.py").write_text("# loses to the package\n")
    (t / "shadow").mkdir()
    (t / "shadow" / "__init__.py").write_text("")
    (t / "test_x.py").write_text("import shadow\nfrom dsv4_kernels.fp8 import naive\n\ndef test_x(): pass\n")
    assert files_of_tests(tmp_path, ["tests/kernels/test_x.py::test_x"]) == [
        "kernels/codecs.py", "kernels/fp8/__init__.py", "kernels/fp8/layout.py", "kernels/fp8/naive.py",
        "tests/kernels/shadow/__init__.py", "tests/kernels/test_x.py"]


def test_an_alias_module_reaches_what_its_parent_folders_tests_run(project):
    """An alias module in a subfolder (tests/regress/vllm/v0_33/) imports its tests from the folder
    above: the check scripts they name (in the checks/ folder above the alias), the helper modules
    beside them (plugins run by name), and the venv pins beside them are its test code too."""
    t = project / "tests" / "regress" / "vllm"
    (t / "checks").mkdir()
    (t / "checks" / "reader.py").write_text("x = 1\n")
    (t / "_plugin.py").write_text("# run by name: -p _plugin\n")
    (t / "requirements-cpu.txt").write_text("numpy==2.4.6\n")
    (t / "v0_33").mkdir()
    (t / "v0_33" / "test_v0_33_b.py").write_text('from test_b import test_cpu  # noqa: F401\nCHECK = "reader"\n')
    files = files_of_tests(project, ["tests/regress/vllm/v0_33/test_v0_33_b.py::test_cpu"])
    assert files == ["tests/conftest.py", "tests/regress/vllm/_gate.py", "tests/regress/vllm/_plugin.py",
                     "tests/regress/vllm/checks/reader.py", "tests/regress/vllm/conftest.py",
                     "tests/regress/vllm/requirements-cpu.txt", TEST_B, "tests/regress/vllm/v0_33/test_v0_33_b.py"]
    _record(project, "gpu", "H200", "2026-12-01T10:00:00+00:00", fingerprint(project, files))
    (t / "requirements-cpu.txt").write_text("numpy==2.5.0\n")
    [m] = compute_matrix(project)
    # patch b binds TEST_B, whose folder's pins changed: its record is older than its test code
    assert {(r.name, c.status) for r in m.rows for c in r.cells} >= {("0002-b.patch", "stale-tests")}
