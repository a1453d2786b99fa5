"""Issue 11: every bad input gets one line naming what is wrong and a documented exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"


def cli(env, *args, extra_env=None):
    return subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True,
                          text=True, env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root), **(extra_env or {})})


def one_line(p, code, *words):
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("·")]
    assert p.returncode == code, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def stack(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    return env.stack.patch_dir


def edit(patch: Path, old: bytes, new: bytes) -> None:
    raw = patch.read_bytes()
    assert old in raw
    patch.write_bytes(raw.replace(old, new, 1))


SUBJECTS = [b"=?utf-8?b?!!!!?=", b"=?x-no-such-charset?q?abc?=", b"=?utf-8?q?=ZZ?= tail", b"=?utf-8?b?/w==?="]


@pytest.mark.parametrize("subject", SUBJECTS)
def test_malformed_rfc2047_subject(env, stack, subject):
    edit(stack / "three.patch", b"Subject: [DSV4] Three", b"Subject: " + subject)
    p = cli(env, "check")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    p = cli(env, "apply", "demo", "--force")
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr


def test_patch_file_that_is_a_folder(env, stack):
    (stack / "three.patch").unlink()
    (stack / "three.patch").mkdir()
    one_line(cli(env, "apply", "demo", "--force"), 1, "three.patch", "folder")
    assert "folder" in cli(env, "check").stderr


def test_series_that_is_a_folder(env, stack):
    (stack / "series").unlink()
    (stack / "series").mkdir()
    one_line(cli(env, "apply", "demo", "--force"), 1, "series", "folder")
    p = cli(env, "check")
    assert p.returncode == 1 and "Traceback" not in p.stderr


@pytest.mark.parametrize("data", [b"caf\xe9.patch\n", b"three.patch\x00\n", b"\xff\xfe\n"])
def test_latin1_or_nul_in_series(env, stack, data):
    (stack / "series").write_bytes(data)
    one_line(cli(env, "apply", "demo", "--force"), 1, "series:1")
    p = cli(env, "check")
    assert p.returncode == 1 and "series:1" in p.stderr and "Traceback" not in p.stderr


def test_out_naming_a_file(env, stack, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    one_line(cli(env, "apply", "demo", "--out", str(f)), 1, str(f), "file")
    assert f.read_text() == "x"


def test_out_unwritable(env, stack):
    one_line(cli(env, "apply", "demo", "--out", "/proc/self/no-such/out"), 1, "no-such/out", "cannot write")


def test_out_empty_string_is_a_usage_error_and_builds_nothing(env, stack):
    before = sorted(os.listdir(env.root))
    p = subprocess.run([sys.executable, str(TOOL), "apply", "demo", "--out", "", "--project", str(env.root)],
                       capture_output=True, text=True, cwd=env.root,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)})
    assert p.returncode == 2 and "empty" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert sorted(os.listdir(env.root)) == before


FORMAT = {
    "no From:": (b"From: Pat Cher <pat@example.com>\n", b""),
    "zero-count hunk": (b"@@ -1,6 +1,6 @@", b"@@ -0,0 +0,0 @@"),
    "short hunk": (b" line 6\n", b""),
    "hunk header without @@": (b"@@ -1,6 +1,6 @@", b"@@ -1,6 +1,6"),
}


@pytest.mark.parametrize("kind", sorted(FORMAT))
def test_format_errors_are_check_errors_not_conflicts(env, stack, kind):
    old, new = FORMAT[kind]
    edit(stack / "three.patch", old, new)
    p = cli(env, "check")
    assert p.returncode == 1 and "three.patch" in p.stderr and "Traceback" not in p.stderr, p.stderr
    one_line(cli(env, "apply", "demo", "--force"), 1, "three.patch")


def test_binary_files_differ_without_data(env):
    env.author({"zz/blob.bin": bytes(range(256))}, "[DSV4] Blob")
    patch = env.stack.patch_dir / "blob.patch"
    raw = patch.read_bytes()
    head = raw[: raw.index(b"GIT binary patch")]
    patch.write_bytes(head + b"Binary files /dev/null and b/zz/blob.bin differ\n")
    p = cli(env, "check")
    assert p.returncode == 1 and "without data" in p.stderr, p.stderr
    one_line(cli(env, "apply", "demo", "--force"), 1, "blob.patch", "without data")


def test_duplicate_series_entry_is_refused_by_apply(env, stack):
    (stack / "series").write_text("three.patch\nthree.patch\n")
    one_line(cli(env, "apply", "demo", "--force"), 1, "series:2", "duplicate")


def test_square_brackets_survive_in_error_lines(env, stack):
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('upstream = "https://example.invalid/demo"\n', ""))
    line = one_line(cli(env, "apply", "demo"), 1)
    assert "[stacks.demo]" in line, line


def test_unknown_stack_is_a_usage_error(env, stack):
    one_line(cli(env, "apply", "nosuch"), 2, "nosuch")
    one_line(cli(env, "export", "nosuch"), 2, "nosuch")


def test_sigint_exits_130_with_one_line_and_no_orphaned_git(env, stack, tmp_path):
    """A git that hangs while making or switching commits (am, fast-import, read-tree): SIGINT to the tool ends it with 130, one line, and the git child
    is gone (subprocess.run kills it on the way out)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    pidfile = tmp_path / "git.pid"
    (bindir / "git").write_text(f"""#!/bin/sh
for a in "$@"; do case "$a" in am|fast-import|read-tree) echo $$ > {pidfile}; exec sleep 60;; esac; done
exec {real} "$@"
""")
    (bindir / "git").chmod(0o755)
    cli(env, "apply", "demo", "--force")  # warm: the base is imported once
    edit(stack / "three.patch", b"Why and how.", b"Why and how, again.")
    proc = subprocess.Popen([sys.executable, str(TOOL), "apply", "demo", "--project", str(env.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
                                 "DSV4_PATCH_CACHE": str(env.cache.root)})
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pidfile.exists(), proc.communicate()
    git_pid = int(pidfile.read_text())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("·")]
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in err, err
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(git_pid, 0)
    assert "line three" in (env.out / "demo/src/a.py").read_text()  # the previous tree is intact
