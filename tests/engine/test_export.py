"""export: zero churn. apply -> export is byte-identical for every kind of change git can carry."""

from __future__ import annotations

import os

import pytest
from synth import author_commit, git, numbered

from dsv4_patch.errors import Dsv4Error
from dsv4_patch.gitcmd import Git


def roundtrip(env):
    """Rebuild from the patch files and export again: the bytes must not move."""
    before = env.patch_bytes()
    res = env.rebuild()
    after_check = env.export(check=True)
    assert not after_check.stale, after_check.diff
    env.export()
    assert env.patch_bytes() == before
    return res


def test_modify_and_new_file_in_new_folder(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n"),
                "deep/new/folder/c.py": "print('hi')\n"}, "[DSV4] New folder")
    res = roundtrip(env)
    assert (res.tree / "deep/new/folder/c.py").read_text() == "print('hi')\n"


def test_rename_with_edit(env):
    tree = env.apply().tree
    git(tree, "mv", "src/b.txt", "src/renamed.txt")
    author_commit(tree, {"src/renamed.txt": numbered(30, "b").replace("b 29\n", "b 29!\n")}, "[DSV4] Rename b")
    env.export()
    text = (env.root / "patches/demo/rename-b.patch").read_text()
    assert "rename from src/b.txt" in text and "rename to src/renamed.txt" in text
    res = roundtrip(env)
    assert not (res.tree / "src/b.txt").exists() and (res.tree / "src/renamed.txt").exists()


def test_binary_file(env):
    blob = bytes(range(256)) * 7 + b"\x00\xff"
    env.author({"assets/blob.bin": blob}, "[DSV4] Add blob")
    assert b"GIT binary patch" in (env.root / "patches/demo/add-blob.patch").read_bytes()
    res = roundtrip(env)
    assert (res.tree / "assets/blob.bin").read_bytes() == blob


def test_mode_change(env):
    tree = env.apply().tree
    os.chmod(tree / "src/a.py", 0o755)
    author_commit(tree, {}, "[DSV4] Make a executable", "Needed.\n\nUpstream-Status: Pending\n")
    env.export()
    assert "new mode 100755" in (env.root / "patches/demo/make-a-executable.patch").read_text()
    res = roundtrip(env)
    assert os.stat(res.tree / "src/a.py").st_mode & 0o111


def test_no_newline_at_end_of_file(env):
    env.author({"src/a.py": numbered(60).rstrip("\n")}, "[DSV4] Drop final newline")
    assert "\\ No newline at end of file" in (env.root / "patches/demo/drop-final-newline.patch").read_text()
    res = roundtrip(env)
    assert not (res.tree / "src/a.py").read_bytes().endswith(b"\n")


def test_crlf_file(env):
    crlf = "".join(f"row {i}\r\n" for i in range(20)).encode()
    env.up.write("win/crlf.txt", crlf)
    env.repin(env.up.commit("crlf file"))
    env.author({"win/crlf.txt": crlf.replace(b"row 7\r\n", b"row seven\r\n")}, "[DSV4] Edit CRLF file")
    res = roundtrip(env)
    assert (res.tree / "win/crlf.txt").read_bytes() == crlf.replace(b"row 7\r\n", b"row seven\r\n")


def test_non_ascii_author_and_long_subject(env):
    tree = env.apply().tree
    (tree / "src/a.py").write_text(numbered(60).replace("line 1\n", "line one\n"))
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "[DSV4] " + "A very long subject that git folds over several header lines " * 2,
        env={"GIT_AUTHOR_NAME": "Zoë Ærø 陳", "GIT_AUTHOR_EMAIL": "z@example.com"})
    env.export()
    res = roundtrip(env)
    assert Git(res.tree).out("log", "-1", "--format=%an") == "Zoë Ærø 陳"


def test_check_reports_stale_files_and_writes_nothing(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    p = env.root / "patches/demo/three.patch"
    p.write_bytes(p.read_bytes().replace(b"line three", b"line 3 changed by hand"))
    # the hand-edited file still applies? No: rebuild from the current tree instead
    res = env.export(check=True)
    assert res.stale and "three.patch" in res.written and "-+line 3 changed by hand" in res.diff
    assert b"changed by hand" in p.read_bytes()  # --check wrote nothing


def test_export_removes_dropped_patches_and_keeps_series_header(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")}, "[DSV4] Bee")
    tree = env.out / "demo"
    git(tree, "reset", "-q", "--hard", "HEAD~1")
    with pytest.raises(Dsv4Error, match=r"would delete 1 patch file.*bee\.patch") as ei:
        env.export()  # never without being told which
    assert "--remove bee.patch" in ei.value.one_line()
    assert sorted(env.patch_bytes()) == ["bee.patch", "series", "three.patch"]
    env.export(remove=["bee.patch"])
    assert sorted(env.patch_bytes()) == ["series", "three.patch"]
    assert (env.root / "patches/demo/series").read_text() == "# demo series\nthree.patch\n"


def test_export_refuses_uncommitted_changes(env):
    tree = env.apply().tree
    (tree / "src/a.py").write_text("dirty\n")
    with pytest.raises(Dsv4Error, match="uncommitted changes"):
        env.export()


def test_a_patch_file_does_not_change_when_another_is_appended(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    first = env.patch_bytes()["three.patch"]
    env.author({"assets/z.bin": b"\x00\x01\x02"}, "[DSV4] Binary last")
    env.author({"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")}, "[DSV4] Bee")
    files = env.patch_bytes()
    assert files["three.patch"] == first
    assert all(not data.endswith(b"\n\n\n") for data in files.values())
    roundtrip(env)
