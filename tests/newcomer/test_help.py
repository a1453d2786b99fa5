"""Item 8: every command's help keeps its Examples verbatim, lists its exit codes; e2e has examples;
`--out` states its real default; tables never cut names; shell completion is on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"  # not from conftest: several conftest modules share that name

COMMANDS = ["status", "apply", "export", "check", "regress", "pin", "build", "e2e", "bump"]


def _help(*args, columns=200):
    p = subprocess.run([sys.executable, str(TOOL), *args, "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": str(columns)})
    assert p.returncode == 0, p.stderr
    return p.stdout


def _example_lines(text: str) -> list[str]:
    """The `dsv4-patch ...` lines of the Examples block of a docstring, as written."""
    block = text.split("Examples:", 1)[1]
    return [ln.strip() for ln in block.splitlines() if ln.strip().startswith(("dsv4-patch ", "DSV4_"))]


@pytest.mark.parametrize("command", COMMANDS)
def test_examples_are_kept_line_by_line_and_exit_codes_listed(command):
    text = _help(command)
    assert "Exit codes:" in text
    assert "Examples:" in text
    lines = [ln.strip() for ln in text.splitlines()]
    examples = _example_lines(text)
    assert len(examples) >= 2
    for ex in examples:  # each example on a line of its own (not re-wrapped into one paragraph)
        assert ex in lines


@pytest.mark.parametrize("command", ["apply", "regress", "export", "build"])
def test_out_default_is_the_project_build_folder_not_the_cwd(command):
    text = " ".join(_help(command).split())
    assert "[default: ./build]" not in text
    assert "default: build/ in the project root" in text


def test_shell_completion_is_offered():
    assert "--install-completion" in _help()


def test_tables_print_whole_names_at_80_columns(env, cli):
    long = "x" * 70
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, f"[DSV4] {long}",
               body="Why.\n\nUpstream-Status: Pending\nDrop-When: upstream merges the very long named change\n"
                    "Regression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n")
    name = next((env.root / "patches/demo").glob("*.patch")).name
    assert len(name) > 60  # wider than its column at 80
    out = cli(env, "status", check=0).stdout
    assert name in out and "…" not in out
    out = cli(env, "regress", check=0).stdout
    assert name in out and "…" not in out


def test_square_brackets_in_help_survive():
    assert "[default: all]" in _help("apply")
    assert re.search(r"\[test\]|\[kernels\]|<stack>", _help("regress") + _help("apply"))
