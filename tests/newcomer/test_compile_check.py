"""Issue 30 item 1: a patch that leaves a Python file that does not compile fails `apply`, `check`
and `status --check` in one line naming the file, the line and the patch; a file that did not
compile upstream either (Python 2, a template) is not blamed on the patches."""

from __future__ import annotations

import json
import shutil

META = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"
# "keep both sides" of a conflict on a class header: the duplicated header has no body
BROKEN = "class Rocm:\nclass Rocm:\n    x = 1\n"


def _project_with_python(env):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.up.write("pkg/rocm.py", "class Rocm:\n    x = 0\n")
    env.up.write("pkg/py2.py", "print 'hello'\n")  # Python 2: does not compile upstream either
    env.repin(env.up.commit("python files"))


def _broken_patch(env) -> str:
    env.author({"pkg/rocm.py": BROKEN}, "[DSV4] Keep both sides", body=META)
    return next((env.root / "patches/demo").glob("*.patch")).name


def test_apply_check_and_status_name_the_file_line_and_patch(env, cli):
    _project_with_python(env)
    name = _broken_patch(env)
    shutil.rmtree(env.out / "demo")

    p = cli(env, "apply", "demo", check=1)
    lines = [ln for ln in p.stderr.splitlines() if "IndentationError" in ln]
    assert len(lines) == 1, p.stderr
    assert "demo/pkg/rocm.py:2: IndentationError: " in lines[0] and f"(patch {name})" in lines[0]
    assert "Traceback" not in p.stderr
    assert (env.out / "demo/pkg/rocm.py").read_text() == BROKEN  # the tree is kept for the fix

    p = cli(env, "apply", "demo", check=1)  # the no-op apply says it again
    assert "pkg/rocm.py:2: IndentationError" in p.stderr

    p = cli(env, "check", "demo", check=1)
    assert "build/demo/pkg/rocm.py:2: error: IndentationError: " in p.stderr and name in p.stderr

    shutil.rmtree(env.out / "demo")  # no built tree: computed from the (cached) pin
    p = cli(env, "check", "demo", check=1)
    assert "build/demo/pkg/rocm.py:2: error: IndentationError" in p.stderr

    p = cli(env, "status", "demo", "--check", "--no-semantic", check=1)
    assert "does not compile: build/demo/pkg/rocm.py:2: IndentationError" in p.stdout and name in p.stdout
    p = cli(env, "status", "demo", "--check", "--no-semantic", "--json", check=1)
    (row,) = json.loads(p.stdout)
    assert row["compiles"]["ok"] is False and "pkg/rocm.py:2" in row["compiles"]["problems"][0]


def test_fixed_patch_and_files_not_python_upstream_pass(env, cli):
    _project_with_python(env)
    env.author({"pkg/rocm.py": "class Rocm:\n    x = 1\n", "pkg/py2.py": "print 'hello, world'\n",
                "pkg/template.py.in": "class {{ name }}:\n", "src/b.txt": "not python\n"},
               "[DSV4] Fine", body=META)
    shutil.rmtree(env.out / "demo")
    cli(env, "apply", "demo", check=0)
    p = cli(env, "check", "demo", check=0)
    assert "all stacks clean" in p.stdout and "error" not in p.stderr
    cli(env, "status", "demo", "--check", "--no-semantic", check=0)


def test_a_new_file_that_does_not_compile_is_reported(env, cli):
    _project_with_python(env)
    env.author({"pkg/new.py": "def f(:\n    pass\n"}, "[DSV4] New", body=META)
    p = cli(env, "check", "demo", check=1)
    assert "build/demo/pkg/new.py:1: error: SyntaxError" in p.stderr


def test_check_without_any_local_pin_says_what_it_did_not_compile(env, cli):
    _project_with_python(env)
    _broken_patch(env)
    shutil.rmtree(env.out / "demo")
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace(f'path = "{env.up.path}"', 'path = "/nonexistent/upstream"'))
    p = cli(env, "check", "demo", check=0)  # nothing local to read: a note, not a failure
    assert "note: 1 Python file the series touches not compiled" in p.stderr
    assert "dsv4-patch apply demo" in p.stderr


def test_status_check_with_intent_tests_reads_the_objects_it_made(env, cli):
    """`status --check` with its intent tests (the default) builds only the pristine pin and makes
    the patches' commits in its object store: the compile check reads them there."""
    _project_with_python(env)
    _broken_patch(env)
    shutil.rmtree(env.out / "demo")
    p = cli(env, "status", "demo", "--check", check=1)
    assert "does not compile: build/demo/pkg/rocm.py:2: IndentationError" in p.stdout, p.stdout
