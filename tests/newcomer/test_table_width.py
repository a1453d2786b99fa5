"""Issue 30 item 5: `status` and `regress` tables fit COLUMNS (else the terminal, else 100 columns
off a terminal), keep patch names whole, and list each test that did not pass below the table;
`--wide` prints the full table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"
SKIP_WHY = "needs a gfx936 GPU with the DTK Triton build " + "and a long explanation " * 8
TESTS = f"""
import pytest


def test_ok():
    pass


def test_a_rather_long_test_name_that_checks_the_decode_against_the_reference_values():
    pytest.skip({SKIP_WHY!r})
"""


def _meta(tests: list[str]) -> str:
    return ("Why.\n\nUpstream-Status: Submitted https://github.com/example/project/pull/123456\n"
            + "".join(f"Regression-Test: tests/test_demo.py::{t}\n" for t in tests)
            + "Drop-When: upstream merges the change that this rather long drop-when sentence describes in full\n"
            + "Signed-off-by: Pat Cher <pat@example.com>\n")


@pytest.fixture
def project(env):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(TESTS)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")},
               "[DSV4] add a pytorch reference decode for the fp8 ds mla sparse mla", body=_meta(["test_ok"]))
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")},
               "[DSV4] encode e4m3 with integer ops in the dsv4 triton cache writer",
               body=_meta(["test_ok", "test_a_rather_long_test_name_that_checks_the_decode_against_the_reference_values"]))
    names = sorted(p.name for p in (env.root / "patches/demo").glob("*.patch"))
    assert all(len(n) > 60 for n in names)
    return env, names


def _run(env, *args, columns: str | None):
    e = {**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)}
    e.pop("COLUMNS", None)
    if columns is not None:
        e["COLUMNS"] = columns
    p = subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True,
                       text=True, env=e)  # stdout is a pipe: off a terminal
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("columns", ["80", "120", None])
def test_tables_fit_the_width_and_keep_names_whole(project, columns):
    env, names = project
    width = int(columns or 100)  # off a terminal without COLUMNS: 100
    for cmd in ("status", "regress"):
        text = _run(env, cmd, "demo", columns=columns)
        lines = text.splitlines()
        too_wide = [ln for ln in lines if len(ln) > width]
        assert not too_wide, f"{cmd} at {width}: {too_wide}"
        for name in names:  # each name whole on one line, never split mid-word
            assert any(name in ln for ln in lines), f"{cmd} at {width}: {name} split:\n{text}"
        if cmd == "regress":
            assert "tests that did not pass" in text
            node = "tests/test_demo.py::test_a_rather_long_test_name_that_checks_the_decode_against_the_reference_values"
            assert any(ln.strip() == node for ln in lines) or len(node) + 4 > width, text
            assert "skipped: needs a gfx936 GPU" in text and "test_ok" not in text, text  # passing ones are not listed
            assert "1 passed, 1 partial" in text or "1 partial, 1 passed" in text


def test_wide_prints_every_cell_whole(project):
    env, names = project
    text = _run(env, "regress", "demo", "--wide", columns="80")
    assert any(len(ln) > 120 for ln in text.splitlines())  # the whole reason in its cell
    assert " ".join(SKIP_WHY.split()) in " ".join(text.split())
    text = _run(env, "status", "demo", "--wide", columns="80")
    assert "https://github.com/example/project/pull/123456" in text
