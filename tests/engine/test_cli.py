"""The command line: exit codes, --json, one-line errors, regress and bisect on a synthetic stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"


def cli(env, *args, check=None):
    p = subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True, text=True,
                       env={**__import__("os").environ, "DSV4_PATCH_CACHE": str(env.cache.root)})
    if check is not None:
        assert p.returncode == check, p.stdout + p.stderr
    return p


REGRESS_TESTS = '''
import os
from pathlib import Path

def tree():
    return Path(os.environ["DSV4_TREE_DEMO"])

def test_three():
    assert "line three" in (tree() / "src/a.py").read_text()

def test_bee():
    assert "b three" in (tree() / "src/b.txt").read_text()

def test_base_is_pristine():
    assert "line three" not in (Path(os.environ["DSV4_BASE_DEMO"]) / "src/a.py").read_text()
'''


def two_patches(env, second_breaks=False):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(REGRESS_TESTS + "\ndef test_ok():\n    pass\n")
    meta = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_three\n" \
           "Regression-Test: tests/test_demo.py::test_base_is_pristine\nSigned-off-by: Pat Cher <pat@example.com>\n"
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=meta)
    b = numbered(30, "b").replace("b 3\n", "b three\n")
    a = numbered(60).replace("line 3\n", "line 3 broken\n" if second_breaks else "line three\n")
    env.author({"src/b.txt": b, "src/a.py": a}, "[DSV4] Bee",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_bee\n"
                    "Signed-off-by: Pat Cher <pat@example.com>\n")


def test_help_teaches_by_example():
    p = subprocess.run([sys.executable, str(TOOL), "apply", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "Examples:" in p.stdout and "--3way" in p.stdout


def test_unknown_option_is_usage_exit_2(env):
    assert cli(env, "apply", "--bogus").returncode == 2


def test_unknown_stack_is_one_line_usage_error_exit_2(env):
    p = cli(env, "apply", "nope", check=2)
    assert "no stack named 'nope'" in p.stderr and "known stacks: demo" in p.stderr


def test_apply_json_then_noop(env):
    two_patches(env)
    import shutil

    shutil.rmtree(env.out / "demo")  # built from the patch files, not the adopted authoring tree
    first = json.loads(cli(env, "apply", "--json", check=0).stdout)
    assert first[0]["status"] == "applied" and len(first[0]["commits"]) == 2
    again = json.loads(cli(env, "apply", "--json", check=0).stdout)
    assert again[0]["status"] == "noop"


def test_conflict_exit_3_with_patch_file_and_expected_lines(env):
    two_patches(env)
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 upstream\n"))
    env.repin(env.up.commit("conflict"))
    p = cli(env, "apply", check=3)
    assert "three.patch" in p.stderr and "src/a.py" in p.stderr and "| line 3" in p.stderr
    j = json.loads(cli(env, "apply", "--json", check=3).stdout)
    assert j[0]["failure"]["patch"] == "three.patch" and j[0]["exit_code"] == 3 and j[0]["status"] == "conflict"


def test_export_check_exit_1_when_stale(env):
    two_patches(env)
    cli(env, "export", "demo", "--check", check=0)
    p = env.root / "patches/demo/bee.patch"
    p.write_text(p.read_text().replace("Why.", "Why not."))
    out = cli(env, "export", "demo", "--check", check=1)
    assert "-Why not." in out.stdout and "+Why." in out.stdout


def test_check_exit_codes(env):
    two_patches(env)
    cli(env, "check", check=0)
    (env.root / "patches/demo/series").write_text("three.patch\n")
    p = cli(env, "check", check=1)
    assert "bee.patch: error: orphan patch" in p.stderr


def test_status_json_lists_metadata_and_check_applies(env):
    two_patches(env)
    # three.patch also binds test_base_is_pristine, a guard that passes on the pristine pin: it is no
    # evidence, so --check says which id and exits 4 (unverified), with everything else listed
    rows = json.loads(cli(env, "status", "--check", "--json", check=4).stdout)
    assert rows[0]["applies"] == {"ok": True}
    assert [s["passes_on_pristine"] for s in rows[0]["semantic"]] == [["tests/test_demo.py::test_base_is_pristine"], []]
    assert list(rows[0]["unverified"]) == ["three.patch"]
    assert rows[0]["patches"][0]["regression_tests"] == ["tests/test_demo.py::test_three",
                                                        "tests/test_demo.py::test_base_is_pristine"]


def test_regress_passes_and_reports_per_patch(env):
    two_patches(env)
    rep = json.loads(cli(env, "regress", "--json", check=0).stdout)
    assert rep["ok"] and [p["outcome"] for p in rep["patches"]] == ["passed", "passed"]


def test_regress_fails_and_bisect_names_the_first_bad_patch(env):
    two_patches(env, second_breaks=True)  # patch 2 undoes what patch 1's test checks
    rep = json.loads(cli(env, "regress", "--json", check=1).stdout)
    assert {p["patch"]: p["outcome"] for p in rep["patches"]} == {"three.patch": "failed", "bee.patch": "passed"}
    bis = json.loads(cli(env, "regress", "--bisect", "--json", check=1).stdout)
    assert bis["first_bad"] == ["demo", "bee.patch"]


def test_regress_fresh_and_record_ask_the_tests_for_no_stored_result(env, monkeypatch):
    """The project's tests read check results stored by earlier runs (tests/_check_cache.py) unless
    the run's DSV4_CHECK_MEMO says `run`: --fresh and --record say it; a plain regress passes the
    caller's setting on."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(
        "import os\n\ndef test_fresh():\n    assert os.environ.get('DSV4_CHECK_MEMO') == 'run'\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_fresh\n"
                    "Signed-off-by: Pat Cher <pat@example.com>\n")
    monkeypatch.setenv("DSV4_CHECK_MEMO", str(env.tmp / "stored-results"))
    outcome = lambda *a: {p["patch"]: p["outcome"] for p in json.loads(cli(env, "regress", "--json", *a).stdout)["patches"]}
    assert outcome() == {"three.patch": "failed"}
    assert outcome("--fresh") == {"three.patch": "passed"}
    assert outcome("--bisect", "--fresh") == {"three.patch": "passed"}
    assert outcome("--record", "apply,integration") == {"three.patch": "passed"}
    monkeypatch.setenv("DSV4_CHECK_MEMO", "0")  # none at all stays none
    assert outcome("--fresh") == {"three.patch": "failed"}


def test_python_tools_applypatch_runs_as_a_script():
    p = subprocess.run([sys.executable, str(TOOL), "--version"], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0 and p.stdout.strip()


def test_unreachable_stack_is_unavailable_when_all_are_built_but_an_error_when_named(env):
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + """
[stacks.far]
upstream = "https://example.invalid/far"
commit = "%s"
[[stacks.far.sources]]
kind = "git"
url = "%s"
mirror_env = "FAR_MIRROR"
""" % ("a" * 40, env.tmp / "nowhere.git"))
    (env.root / "patches/far").mkdir()
    (env.root / "patches/far/series").write_text("")
    p = cli(env, "apply", check=0)
    assert "warning: far: unavailable, not built:" in p.stderr and "FAR_MIRROR" in p.stderr
    assert "--strict" in p.stderr  # the way to make it an error is named
    assert (env.out / "demo").is_dir()
    cli(env, "apply", "--strict", check=1)
    p = cli(env, "apply", "far", check=1)
    assert "error: far: cannot be built" in p.stderr


def test_regress_record_writes_levels_the_matrix_shows(env):
    two_patches(env)
    p = cli(env, "regress", "--record", "apply,integration", "--hardware", "cpu", check=0)
    files = sorted((env.root / "patches/demo/results").glob("*.json"))
    assert len(files) == 2 and "recorded" in p.stderr
    data = [json.loads(f.read_text()) for f in files]
    assert {d["level"] for d in data} == {"apply", "integration"} and all(d["status"] == "passed" for d in data)
    matrix = json.loads(cli(env, "status", "--matrix", "--json", check=0).stdout)
    levels = matrix[0]["patches"][0]["levels"]
    assert levels["integration"][0]["status"] == "passed" and levels["apply"][0]["hardware"] == "cpu"


def test_regress_record_marks_a_failing_stack_failed(env):
    two_patches(env, second_breaks=True)
    cli(env, "regress", "--record", "integration", check=1)
    (f,) = (env.root / "patches/demo/results").glob("*.json")
    assert json.loads(f.read_text())["status"] == "failed"


def test_script_lists_and_runs_the_lazily_registered_commands():
    top = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True)
    assert top.returncode == 0 and "\n  e2e " in top.stdout and "\n  bump " in top.stdout
    for name in ("e2e", "bump"):
        sub = subprocess.run([sys.executable, str(TOOL), name, "--help"], capture_output=True, text=True)
        assert sub.returncode == 0 and "Usage:" in sub.stdout


def test_every_command_module_is_registered_on_the_app():
    """tools/cmd_*.py that register on the shared app (tools/_cli.py) do so when applypatch imports
    them: a module left out of its import line would be a command that silently does not exist."""
    import ast

    import typer

    from tools import applypatch

    registered = set(typer.main.get_command(applypatch.app).commands)
    for f in sorted((ROOT / "tools").glob("cmd_*.py")):
        tree = ast.parse(f.read_text())
        shared = any(isinstance(n, ast.ImportFrom) and n.module == "tools._cli" and any(a.name == "app" for a in n.names)
                     for n in tree.body)  # cmd_release has an app of its own (a command group)
        on_app = [n.name for n in tree.body if shared and isinstance(n, ast.FunctionDef)
                  and any(ast.unparse(d).startswith("app.command") for d in n.decorator_list)]
        assert set(on_app) <= registered, f"{f.name}: {sorted(set(on_app) - registered)} not registered"
    assert {"status", "apply", "export", "check", "regress", "pin", "build"} <= registered
