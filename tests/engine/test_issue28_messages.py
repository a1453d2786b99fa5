"""Issue 28, messages that called something else a conflict, or a traceback: a NUL byte in a patch
is said as such; `status --check` that cannot check is an error (exit 1), not a conflict (exit 3).

- in a path (`diff --git a/src/a\\0.py ...`): `check` passed it and `apply` died with a traceback
  (subprocess: "ValueError: embedded null byte" when the path reached git's arguments); now both
  refuse it with file:line, as every unsafe path is refused (lint.unsafe_path);
- in a context or removed line of a text hunk: apply called it a conflict and showed the expected
  lines with the NUL invisible ("line  4"); the conflict line now says the patch's lines hold a
  NUL byte the upstream file does not, and the expected lines show it as \\0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"


def cli(env, *args):
    return subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True,
                          env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)})


@pytest.fixture
def patch(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    return env.stack.patch_dir / "three.patch"


def _edit(env, patch: Path, old: bytes, new: bytes) -> None:
    raw = patch.read_bytes()
    assert old in raw
    patch.write_bytes(raw.replace(old, new))
    import shutil

    shutil.rmtree(env.out / "demo", ignore_errors=True)


def test_a_nul_byte_in_a_path_is_refused_with_its_line(env, patch):
    _edit(env, patch, b"src/a.py", b"src/a\x00.py")
    for args, code in ((("check",), 1), (("apply", "demo"), 1)):
        p = cli(env, *args)
        err = p.stderr.decode("utf-8", "replace")
        assert "Traceback" not in err and p.returncode == code, err[-2000:]
        assert "three.patch:" in err and "NUL byte" in err, err
    assert not (env.out / "demo").exists()


@pytest.mark.parametrize("where", ["context", "removed"])
def test_a_nul_byte_in_a_hunk_line_is_named_not_just_called_a_conflict(env, patch, where):
    old, new = {"context": (b" line 4\n", b" line\x00 4\n"), "removed": (b"-line 3\n", b"-line\x003\n")}[where]
    _edit(env, patch, old, new)
    p = cli(env, "apply", "demo")
    err = p.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and p.returncode == 3, err[-2000:]
    first = next(ln for ln in err.splitlines() if ln.startswith("error:"))
    assert "NUL byte" in first and "src/a.py" in first, first
    assert "\\0" in err  # the expected lines show where it is


@pytest.mark.parametrize("why", ["no git on PATH", "source gone"])
def test_status_check_that_cannot_check_is_an_error_not_a_conflict(env, patch, why):
    """status --check turned every error (git missing, the source unreachable, a full disk) into
    "does not apply: ..." and exit 3, the conflict code: a CI job read it as a patch to rebase."""
    import shutil

    extra = {}
    if why == "no git on PATH":
        (env.tmp / "empty-bin").mkdir()
        extra["PATH"] = str(env.tmp / "empty-bin")
    else:
        shutil.move(env.up.path, env.tmp / "upstream-gone")
    p = subprocess.run([sys.executable, str(TOOL), "status", "--check", "--project", str(env.root)],
                       capture_output=True, text=True,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root), "COLUMNS": "200", **extra})
    assert "Traceback" not in p.stderr and p.returncode == 1, p.stdout + p.stderr
    assert "does not apply" not in p.stdout and "not checked:" in p.stdout, p.stdout
