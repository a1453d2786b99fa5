"""Issue 11 item 1: a corrupt binary patch is never silently dropped.

`git am` prints "corrupt binary patch" for these and still exits 0 with the file missing. `check`
rejects the payload itself, `apply` refuses it, and independently of the parser every patch's
commit is verified to change every path the patch names."""

from __future__ import annotations

import re

import pytest
from synth import numbered

from dsv4_patch import patchfile, tree
from dsv4_patch.config import load_project
from dsv4_patch.errors import Dsv4Error, PatchFormatError
from dsv4_patch.lint import lint_stack

BLOB = bytes((i * 131 + 7) % 251 for i in range(900))


def binary_stack(env) -> bytes:
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n"), "zz/blob.bin": BLOB},  # sorts last: git drops it silently
               "[DSV4] Add blob")
    return (env.root / "patches/demo/add-blob.patch").read_bytes()


def data_lines(raw: bytes) -> list[tuple[int, bytes]]:
    """(index, line) of the base85 lines of the first binary block."""
    lines = raw.split(b"\n")
    start = next(i for i, ln in enumerate(lines) if ln.startswith(b"literal ")) + 1
    out = []
    for i in range(start, len(lines)):
        if not lines[i]:
            break
        out.append((i, lines[i]))
    return out


def corrupt(raw: bytes, how: str) -> bytes:
    lines = raw.split(b"\n")
    rows = data_lines(raw)
    i, ln = rows[len(rows) // 2]
    if how == "bad-base85":
        lines[i] = ln[:5] + b'"' + ln[6:]  # '"' is not in git's base85 alphabet
    elif how == "bad-zlib":
        j, ln0 = rows[0]
        lines[j] = ln0[:1] + (b"0" if ln0[1:2] != b"0" else b"1") + ln0[2:]  # wrong zlib header
    elif how == "wrong-length-char":
        lines[i] = (b"A" if ln[:1] != b"A" else b"B") + ln[1:]
    elif how == "false-literal-size":
        k = next(k for k, x in enumerate(lines) if x.startswith(b"literal "))
        lines[k] = b"literal " + str(int(lines[k].split()[1]) + 17).encode()
    elif how == "truncated":
        del lines[i:rows[-1][0] + 1]
    return b"\n".join(lines)


HOW = ["bad-base85", "bad-zlib", "wrong-length-char", "false-literal-size", "truncated"]


@pytest.mark.parametrize("how", HOW)
def test_check_rejects_a_corrupt_binary_payload(env, how):
    raw = binary_stack(env)
    (env.root / "patches/demo/add-blob.patch").write_bytes(corrupt(raw, how))
    project = load_project(env.root)
    findings = lint_stack(project, project.stack("demo"))
    assert any("add-blob.patch" in f.file and "binary" in f.message for f in findings), findings
    assert all("\n" not in str(f) for f in findings)


@pytest.mark.parametrize("how", HOW)
def test_apply_refuses_a_corrupt_binary_patch_as_a_format_error(env, how):
    raw = binary_stack(env)
    before = (env.out / "demo" / ".git" / "dsv4" / "state.json").read_bytes()
    (env.root / "patches/demo/add-blob.patch").write_bytes(corrupt(raw, how))
    with pytest.raises(PatchFormatError, match=r"add-blob\.patch:\d+: .*binary"):
        env.apply(force=True)
    assert (env.out / "demo/zz/blob.bin").read_bytes() == BLOB  # the previous tree is intact
    assert (env.out / "demo" / ".git" / "dsv4" / "state.json").read_bytes() == before


def test_intact_binary_patch_passes_the_payload_check(env):
    raw = binary_stack(env)
    p = patchfile.parse_patch_bytes(raw, "add-blob.patch")
    assert [f.path for f in p.files if f.binary] == ["zz/blob.bin"]


@pytest.mark.parametrize("how", HOW)
def test_a_commit_that_misses_a_path_of_its_patch_is_refused(env, how, monkeypatch):
    """The verification step on its own: with the payload check disabled, git drops the file and
    the build still refuses (this holds however the commits are made)."""
    raw = binary_stack(env)
    (env.root / "patches/demo/add-blob.patch").write_bytes(corrupt(raw, how))
    monkeypatch.setattr(patchfile, "check_binary", lambda *a, **k: None)
    with pytest.raises(Dsv4Error) as ei:
        env.rebuild()
    msg = ei.value.one_line()
    assert "add-blob.patch" in msg and "zz/blob.bin" in msg, msg
    assert "\n" not in msg


def test_verification_names_every_path(env):
    binary_stack(env)
    g = tree.Git(env.rebuild().tree)
    stack = tree.load_stack(env.stack)
    commits = tree._commits(g, g.rev(tree.BASE_REF))
    tree.verify_commits(g, stack.patches, commits)  # the real build passes
    fake = [(n, g.rev(tree.BASE_REF)) for n, _ in commits]  # a "commit" that changed nothing
    with pytest.raises(Dsv4Error, match=re.escape("zz/blob.bin")):
        tree.verify_commits(g, stack.patches, fake)
