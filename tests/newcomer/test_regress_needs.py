"""Items 1 and 6: `regress` says in one line what it is missing and how to install it; a patch whose
bound tests all skipped is "not verified" with the skip reason, and `--record` does not fail the stack."""

from __future__ import annotations

import re
import json
import subprocess
import sys

from synth import numbered

from dsv4_patch import regress
from dsv4_patch.errors import Dsv4Error

HIDE_PYTEST = '''
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "pytest" or name.startswith("pytest.") or name == "_pytest" or name.startswith("_pytest."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, _Hide())
'''


def _author(env, subject, files, tests):
    body = "Why.\n\nUpstream-Status: Pending\n" + "".join(f"Regression-Test: {t}\n" for t in tests) + "Signed-off-by: Pat Cher <pat@example.com>\n"
    env.author(files, subject, body=body)


def _tests(env, text):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(text)


def test_pytest_missing_is_one_line_with_the_install_command(env, cli, tmp_path):
    _tests(env, "def test_ok():\n    pass\n")
    _author(env, "[DSV4] Three", {"src/a.py": numbered(60).replace("line 3\n", "line three\n")},
            ["tests/test_demo.py::test_ok"])
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_PYTEST)
    p = cli(env, "regress", check=1, extra_env={"PYTHONPATH": str(hide)})
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, p.stderr
    assert "regress needs pytest" in errors[0] and "pip install" in errors[0] and "[test]" in errors[0]
    assert "missing" not in p.stdout  # no table labelling every test id "missing"


def test_require_pytest_checks_the_interpreter_it_is_given(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    try:
        regress.require_pytest(str(bare / "bin" / "python"))
    except Dsv4Error as e:
        assert str(bare / "bin" / "python") in e.one_line() and "-m pip install" in e.one_line()
    else:
        raise AssertionError("a venv without pytest passed")
    regress.require_pytest(sys.executable)  # this one has it


def test_a_module_that_is_not_installed_is_named_with_its_install_command(env, cli):
    _tests(env, "import dsv4_no_such_module_xyz\n\ndef test_ok():\n    pass\n")
    _author(env, "[DSV4] Three", {"src/a.py": numbered(60).replace("line 3\n", "line three\n")},
            ["tests/test_demo.py::test_ok"])
    p = cli(env, "regress", "--json", check=1)
    rep = json.loads(p.stdout)
    (row,) = rep["patches"]
    assert row["outcome"] == "failed"  # not "missing": the id exists, its module does not import
    assert "No module named 'dsv4_no_such_module_xyz'" in row["reason"]
    assert rep["missing_modules"]["dsv4_no_such_module_xyz"].endswith("-m pip install dsv4_no_such_module_xyz")
    p = cli(env, "regress", check=1)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("missing module:"))
    assert "dsv4_no_such_module_xyz" in line and "pip install" in line


def test_missing_modules_map_to_the_project_extra_that_lists_them():
    outcomes = {"t.py::a": {"outcome": "failed", "why": "ModuleNotFoundError: No module named 'triton.language'"},
                "t.py::b": {"outcome": "failed", "why": "AssertionError"}}
    got = regress.missing_modules(outcomes, python="/venv/bin/python")
    assert list(got) == ["triton"]
    assert got["triton"].startswith("/venv/bin/python -m pip install torch==") and "[kernels]'" in got["triton"]
    assert regress.extra_for("pytest") == "test" and regress.extra_for("no-such-dist") is None


SKIPPING = '''
import pytest

def test_ok():
    pass

@pytest.mark.skip(reason="needs an sm_100a GPU")
def test_gpu():
    pass
'''


def test_all_skipped_is_not_verified_per_patch_and_record_keeps_the_passed_patch(env, cli):
    _tests(env, SKIPPING)
    _author(env, "[DSV4] Three", {"src/a.py": numbered(60).replace("line 3\n", "line three\n")},
            ["tests/test_demo.py::test_ok"])
    _author(env, "[DSV4] Gpu", {"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")},
            ["tests/test_demo.py::test_gpu"])
    rep = json.loads(cli(env, "regress", "--json", check=0).stdout)
    by = {r["patch"]: r for r in rep["patches"]}
    assert by["three.patch"]["outcome"] == "passed"
    assert by["gpu.patch"]["outcome"] == "not-verified" and "needs an sm_100a GPU" in by["gpu.patch"]["reason"]
    table = cli(env, "regress", check=0).stdout
    assert re.search(r"demo +not-verified +0/1 +gpu.patch", table) and "skipped: needs an sm_100a GPU" in table, table

    cli(env, "regress", "--record", "integration", check=0)
    (f,) = (env.root / "patches/demo/results").glob("*.json")
    data = json.loads(f.read_text())
    assert data["status"] == "passed"  # not the whole stack failed
    assert [p["name"] for p in data["patches"]] == ["three.patch"]  # only what was verified
    assert "gpu.patch" in data["note"] and "needs an sm_100a GPU" in data["note"]
    matrix = json.loads(cli(env, "status", "--matrix", "--json", check=0).stdout)[0]["patches"]
    cells = {r["patch"]: r["levels"].get("integration", []) for r in matrix}
    assert cells["three.patch"][0]["status"] == "passed" and cells["gpu.patch"] == []  # no "!cpu"


def test_one_file_that_does_not_import_leaves_the_other_files_tests_run_and_nothing_is_recorded(env, cli):
    """A test file whose module is missing (torch in a venv without it) must not turn another patch's tests,
    in another file, into "missing" (pytest stops at a collection error unless told to go on), and a run
    that could not import what the tests need is not evidence about the patches: `--record` writes nothing
    and says why in one line with the install command."""
    tests = env.root / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_needs_module.py").write_text("import dsv4_no_such_module_xyz\n\ndef test_a():\n    pass\n")
    (tests / "test_plain.py").write_text("def test_b():\n    pass\n")
    _author(env, "[DSV4] One", {"src/a.py": numbered(60).replace("line 3\n", "line three\n")},
            ["tests/test_needs_module.py::test_a"])
    _author(env, "[DSV4] Two", {"src/b.py": numbered(60).replace("line 7\n", "line seven\n")},
            ["tests/test_plain.py::test_b"])
    rep = json.loads(cli(env, "regress", "--json", check=1).stdout)
    outcomes = {r["patch"]: r["outcome"] for r in rep["patches"]}
    assert sorted(outcomes.values()) == ["failed", "passed"], rep["patches"]  # not "missing"
    results = sorted(p for p in env.root.rglob("results/*.json"))
    p = cli(env, "regress", "--record", "integration", "--hardware", "cpu", check=1)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "not recorded" in errors[0] and "dsv4_no_such_module_xyz" in errors[0], p.stderr
    assert "pip install" in errors[0]
    assert sorted(p for p in env.root.rglob("results/*.json")) == results  # nothing written
