"""Streaming import (members fed to `git fast-import`, nothing extracted): the same tree as `tar -x` /
`unzip` followed by `git add -A` (the import recipe before streaming, and the blob/tree ids patches
3-way merge against), nothing left behind when interrupted, no git process orphaned."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from synth import git

from dsv4_patch.gitcmd import Git
from dsv4_patch.sources import archive, members
from test_archive_safety import TOP, import_bytes

# Edges planted on purpose: executable bits, an explicit and an empty folder, in-tree and dangling
# links, spaces, quotes, a leading quote, non-ASCII, a newline, a CR, a tab, deep paths,
# an empty file, a .gitignore that would hide files from a plain `git add`, and a binary file.
TAR_MEMBERS = [
    ("f", "setup.py", b"print('hi')\n", 0o644), ("f", "tools/run.sh", b"#!/bin/sh\necho\n", 0o755),
    ("f", "tools/odd-exec", b"x\n", 0o711), ("d", "pkg", b"", 0o755), ("d", "empty", b"", 0o755),
    ("f", "pkg/__init__.py", b"", 0o644), ("f", "pkg/a b.py", b"A = 1\n", 0o644),
    ("f", 'pkg/q"uote.txt', b"q\n", 0o644), ("f", '"lead.txt', b"l\n", 0o644),
    ("f", "pkg/caf\u00e9.py", "# caf\u00e9\n".encode(), 0o644), ("f", "pkg/new\nline", b"n\n", 0o644),
    ("f", "pkg/cr\rtab\t", b"c\n", 0o644), ("f", "a/b/c/d/e/f/g.txt", b"deep\n", 0o644),
    ("f", ".gitignore", b"*.bin\nbuild/\n", 0o644), ("f", "data/blob.bin", bytes(range(256)) * 40, 0o644),
    ("f", "build/kept.py", b"K = 1\n", 0o644), ("l", "docs/pkg", "../pkg", 0), ("l", "dangling", "no/such", 0),
    ("l", "docs/init.py", "pkg/__init__.py", 0),
]


def planted_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for kind, name, data, mode in TAR_MEMBERS:
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.uid = info.gid = 1000
            if kind == "f":
                info.size, info.mode = len(data), mode
                tf.addfile(info, io.BytesIO(data))
            elif kind == "d":
                info.type, info.mode = tarfile.DIRTYPE, mode
                tf.addfile(info)
            else:
                info.type, info.linkname = tarfile.SYMTYPE, data
                tf.addfile(info)
    return buf.getvalue()


def oracle_tree(tmp: Path, unpack: list[str], top: str | None) -> str:
    """The tree id of `git add -A` after the system's own unpacker wrote the archive to disk."""
    out = tmp / "oracle"
    out.mkdir()
    subprocess.run(unpack + [str(out)] if unpack[0] == "tar" else unpack, cwd=out, check=True, capture_output=True)
    root = out / top if top else out
    env = {"GIT_DIR": str(tmp / "oracle.git"), "GIT_WORK_TREE": str(root)}
    git(tmp, "init", "-q", "--bare", str(tmp / "oracle.git"))
    git(root, "add", "-A", "--force", ".", env=env)
    return git(root, "write-tree", env=env).strip()


def test_tar_stream_gives_the_tree_of_tar_x_and_git_add(tmp_path):
    data = planted_tar()
    (tmp_path / "a.tar.gz").write_bytes(data)
    base = import_bytes(tmp_path, data)
    tree = Git(base.git_dir).out("rev-parse", f"{base.commit}^{{tree}}")
    assert tree == oracle_tree(tmp_path, ["tar", "-xzf", str(tmp_path / "a.tar.gz"), "--no-same-owner", "-C"], TOP)
    names = Git(base.git_dir).out("ls-tree", "-r", "-z", "--name-only", base.commit).split("\0")
    assert "pkg/new\nline" in names and "build/kept.py" in names and "data/blob.bin" in names


@pytest.mark.skipif(shutil.which("unzip") is None, reason="the zip oracle is Info-ZIP's unzip, not installed here")
def test_zip_stream_gives_the_tree_of_unzip_and_git_add(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for kind, name, data, mode in TAR_MEMBERS:
            if "\n" in name or "\r" in name:
                continue  # unzip rewrites these; the tar test covers them
            info = zipfile.ZipInfo(name + ("/" if kind == "d" else ""))
            info.create_system = 3  # unix: unzip restores modes and links only then
            fmt = {"f": stat.S_IFREG, "d": stat.S_IFDIR, "l": stat.S_IFLNK}[kind]
            info.external_attr = (fmt | (mode or 0o777)) << 16
            zf.writestr(info, data.encode() if isinstance(data, str) else data)
    (tmp_path / "a.whl").write_bytes(buf.getvalue())
    base = import_bytes(tmp_path, buf.getvalue(), kind="wheel")
    tree = Git(base.git_dir).out("rev-parse", f"{base.commit}^{{tree}}")
    assert tree == oracle_tree(tmp_path, ["unzip", "-q", str(tmp_path / "a.whl")], None)


def fast_import_children() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if not pid.isdigit() or int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"fast-import" in cmd:
            found.append(pid)
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to look for child processes")
def test_interrupted_import_leaves_nothing_and_no_git_running(tmp_path, monkeypatch):
    real = members.read_members

    def interrupted(*a, **kw):
        for i, item in enumerate(real(*a, **kw)):
            if i == 5:
                raise KeyboardInterrupt
            yield item

    monkeypatch.setattr(archive, "read_members", interrupted)
    with pytest.raises(KeyboardInterrupt):
        import_bytes(tmp_path, planted_tar())
    assert fast_import_children() == []
    assert not any((tmp_path / "cache/imports").iterdir())
    assert not any((tmp_path / "cache/tmp").iterdir())
    monkeypatch.setattr(archive, "read_members", real)
    base = import_bytes(tmp_path, planted_tar())  # and the next run imports normally
    assert Git(base.git_dir).out("cat-file", "-p", f"{base.commit}:docs/init.py") == "pkg/__init__.py"


def test_member_shorter_than_its_header_is_a_one_line_error(tmp_path, monkeypatch):
    real = members.read_members

    def short(*a, **kw):
        for m, chunks in real(*a, **kw):
            yield (m, iter([b"".join(chunks)[:-1]])) if m.path == "setup.py" else (m, chunks)

    monkeypatch.setattr(archive, "read_members", short)
    with pytest.raises(archive.SourceError, match=r"pkg-1.0.tar.gz: not a readable tar archive .*setup.py.* holds 11 bytes, its header says 12"):
        import_bytes(tmp_path, planted_tar())
    assert not any((tmp_path / "cache/imports").iterdir())


def test_backslash_in_a_member_name_is_a_folder_separator(tmp_path):
    # zip tools on Windows write `pkg\\mod.py`; `tar -x` would keep the backslash, the import (before
    # streaming too) reads it as a folder, which is what the archive's author meant
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg\\sub\\mod.py", "M = 1\n")
    base = import_bytes(tmp_path, buf.getvalue(), kind="wheel")
    assert Git(base.git_dir).out("ls-tree", "-r", "--name-only", base.commit) == "pkg/sub/mod.py"


def test_a_git_that_stops_reading_is_a_git_error_not_a_broken_pipe(tmp_path):
    from dsv4_patch.gitcmd import GitFailed, init_repo

    g = init_repo(tmp_path / "r.git", bare=True)
    with pytest.raises(GitFailed, match="fast-import") as ei:
        with g.feed("fast-import", "--quiet") as f:
            f.write(b"no such command\n")
            for _ in range(64):  # far more than a pipe holds: git has died by then
                f.write(b"x" * (1 << 20))
            f.close()
    assert "no such command" in ei.value.err or "Unsupported command" in ei.value.err
    assert fast_import_children() == []
