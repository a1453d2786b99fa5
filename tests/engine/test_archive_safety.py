"""Hostile sdists and wheels: every member is checked against the whole tree it builds (never written
through a link, never outside the tree), and every unreadable archive is one line of error."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from dsv4_patch.config import SourceSpec, StackConfig
from dsv4_patch.errors import SourceError
from dsv4_patch.gitcmd import Git
from dsv4_patch.sources import Cache, archive

TOP = "pkg-1.0"


def stack(tmp: Path) -> StackConfig:
    return StackConfig("demo", "https://example.invalid/demo", "v1.0", "v1.0", None, tmp / "patches/demo", [])


def tar_bytes(members: list[tuple]) -> bytes:
    """members: ("f", name, data) | ("l", name, target) | ("d", name) — names under TOP/."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for kind, name, *rest in members:
            info = tarfile.TarInfo(f"{TOP}/{name}")
            if kind == "f":
                info.size, info.mode = len(rest[0]), 0o644
                tf.addfile(info, io.BytesIO(rest[0]))
            elif kind == "l":
                info.type, info.linkname = tarfile.SYMTYPE, rest[0]
                tf.addfile(info)
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
    return buf.getvalue()


def zip_bytes(members: list[tuple]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for kind, name, *rest in members:
            info = zipfile.ZipInfo(name)
            if kind == "f":
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                zf.writestr(info, rest[0])
            else:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                zf.writestr(info, rest[0] if isinstance(rest[0], bytes) else rest[0].encode())
    return buf.getvalue()


def import_bytes(tmp: Path, data: bytes, kind: str = "sdist"):
    """Import `data` as pkg 1.0 through a private cache at tmp/cache (seeded: no network)."""
    cache = Cache(tmp / "cache")
    name = f"{TOP}.tar.gz" if kind == "sdist" else "pkg-1.0-py3-none-any.whl"
    (cache.dir("archives") / name).write_bytes(data)
    spec = SourceSpec(kind, {"package": "pkg", "version": "1.0", "sha256": hashlib.sha256(data).hexdigest(),
                             **({"filename": name} if kind == "wheel" else {})})
    return archive.materialize(stack(tmp), spec, cache)


def outside_cache(tmp: Path) -> list[str]:
    """Everything under tmp except the cache folder (nothing may appear there). os.walk, not rglob:
    an escaped link to a parent folder must not send the listing round a loop."""
    seen = []
    for d, dirs, files in os.walk(tmp):
        dirs[:] = [x for x in dirs if not (d == str(tmp) and x == "cache")]
        seen += [os.path.relpath(os.path.join(d, x), tmp) for x in dirs + files]
    return sorted(seen)


def assert_refused_cleanly(tmp: Path, data: bytes, match: str, kind: str = "sdist") -> SourceError:
    before = outside_cache(tmp)
    with pytest.raises(SourceError, match=match) as ei:
        import_bytes(tmp, data, kind)
    assert "\n" not in ei.value.one_line()
    assert outside_cache(tmp) == before
    cache = tmp / "cache"
    assert not any((cache / "imports").iterdir()) if (cache / "imports").exists() else True
    assert not any((cache / "tmp").iterdir()) if (cache / "tmp").exists() else True
    names = {p.name for p in cache.iterdir()}
    assert "archives" in names and names <= {"archives", "imports", "tmp", "locks"}, names
    if "locks" in names:  # only where a folder cannot be flocked (NFS): the imports lock's stand-in
        assert [p.name for p in (cache / "locks").iterdir()] == ["imports.lock"]
    return ei.value


# A chain of links, each passing a name-only check: sub/l -> .. is the tree root, so sub/l/s1 is a link
# at the root pointing to the root's parent, sub/l/s1/s2 one level further up, ... A member written
# through the chain lands in the test's tmp folder, four levels above the extraction folder.
CHAIN = [("l", "sub/l", ".."), ("l", "sub/l/s1", ".."), ("l", "sub/l/s1/s2", ".."),
         ("l", "sub/l/s1/s2/s3", ".."), ("l", "sub/l/s1/s2/s3/s4", "..")]


def test_tar_symlink_chain_cannot_write_outside(tmp_path):
    data = tar_bytes([("f", "a", b"a\n"), *CHAIN, ("f", "sub/l/s1/s2/s3/s4/evil.txt", b"pwned\n")])
    assert_refused_cleanly(tmp_path, data, r"pkg-1.0.tar.gz: .*sub/l/s1.* symlink")
    assert "evil.txt" not in outside_cache(tmp_path)


def test_zip_symlink_chain_cannot_write_outside(tmp_path):
    data = zip_bytes([("f", "a", b"a\n"), *CHAIN, ("f", "sub/l/s1/s2/s3/s4/evil.txt", b"pwned\n")])
    assert_refused_cleanly(tmp_path, data, r"pkg-1.0-py3-none-any.whl: .*sub/l/s1.* symlink", kind="wheel")
    assert "evil.txt" not in outside_cache(tmp_path)


def test_member_written_after_a_symlink_of_the_same_name_is_refused(tmp_path):
    # link -> a, then a regular member `link`: extraction wrote through the link into `a`
    data = tar_bytes([("f", "a", b"original\n"), ("l", "link", "a"), ("f", "link", b"evil\n")])
    assert_refused_cleanly(tmp_path, data, r"pkg-1.0.tar.gz: member 'pkg-1.0/link' appears twice")


def test_link_resolving_outside_through_another_link_is_refused(tmp_path):
    # `d -> .` and `a -> d/..` each stay in the tree by name; together `a` is the tree's parent
    data = tar_bytes([("f", "x", b"x\n"), ("l", "a", "d/.."), ("l", "d", ".")])
    assert_refused_cleanly(tmp_path, data, r"symlink a -> d/\.\. points outside the tree")


def test_in_tree_chains_and_dangling_links_are_kept(tmp_path):
    data = tar_bytes([("f", "pkg/a.py", b"A = 1\n"), ("l", "docs/pkg", "../pkg"), ("l", "docs/a.py", "pkg/a.py"),
                      ("l", "dangling", "no/such/file")])
    base = import_bytes(tmp_path, data)
    g = Git(base.git_dir)
    assert g.out("ls-tree", "-r", "--name-only", base.commit).split() == ["dangling", "docs/a.py", "docs/pkg", "pkg/a.py"]
    assert g.out("cat-file", "-p", f"{base.commit}:docs/a.py") == "pkg/a.py"


@pytest.mark.parametrize("case", ["corrupt-gzip", "truncated-gzip", "gzip-not-tar", "not-a-zip", "truncated-zip"])
def test_unreadable_archives_are_one_line_errors(tmp_path, case):
    good = tar_bytes([("f", "a", b"a\n" * 1000)])
    data = {
        "corrupt-gzip": good[:10] + bytes(b ^ 0x5A for b in good[10:]),
        "truncated-gzip": good[: len(good) // 2],
        "gzip-not-tar": gzip.compress(b"this is not a tar archive\n" * 40),
        "not-a-zip": b"PK\x03\x04 but nothing else",
        "truncated-zip": zip_bytes([("f", "pkg/a.py", os.urandom(4000))])[:-30],
    }[case]
    kind = "wheel" if "zip" in case else "sdist"
    err = assert_refused_cleanly(tmp_path, data, r"pkg-1.0(\.tar\.gz|-py3-none-any\.whl): ", kind=kind)
    assert "not a readable" in err.message


def test_zip_member_with_a_bad_crc_is_a_one_line_error(tmp_path):
    data = bytearray(zip_bytes([("f", "pkg/a.py", b"A = 1\n" * 50)]))
    i = data.index(b"A = 1")  # stored, not deflated: flip a byte of the payload
    data[i] ^= 0x01
    assert_refused_cleanly(tmp_path, bytes(data), r"not a readable", kind="wheel")


@pytest.mark.parametrize("members, match", [
    ([("f", "a", b"1"), ("f", "a", b"2")], r"member 'pkg-1.0/a' appears twice"),
    ([("l", "a", "b"), ("l", "a", "c"), ("f", "b", b"")], r"member 'pkg-1.0/a' appears twice"),
    ([("f", "a", b"1"), ("f", "a/b", b"2")], r"member 'pkg-1.0/a/b' lies under the file a"),
    ([("f", "a/b", b"2"), ("f", "a", b"1")], r"member 'pkg-1.0/a/b' lies under the file a"),
    ([("d", "a"), ("f", "a", b"1")], r"member 'pkg-1.0/a' is both a folder and a file"),
    ([("l", "a", "sub"), ("f", "a/x", b"1")], r"member 'pkg-1.0/a/x' lies under the symlink a"),
    ([("l", "a", "/etc")], r"symlink a -> /etc points outside the tree"),
    ([("l", "a", "")], r"symlink a has an empty target"),
    ([("l", "a", "b"), ("l", "b", "a")], r"symlink a -> b is a loop"),
    ([("f", "x/.git/config", b"")], r"member 'pkg-1.0/x/.git/config' writes into \.git"),
    ([("f", "x/.GIT/config", b"")], r"member 'pkg-1.0/x/.GIT/config' writes into \.git"),
])
def test_bad_member_lists_are_refused_by_name(tmp_path, members, match):
    assert_refused_cleanly(tmp_path, tar_bytes(members), r"pkg-1.0.tar.gz: " + match)


def test_zip_duplicate_members_are_refused(tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate we write on purpose
        data = zip_bytes([("f", "pkg/a.py", b"1"), ("f", "pkg/a.py", b"2")])
    assert_refused_cleanly(tmp_path, data, r"member 'pkg/a.py' appears twice", kind="wheel")


def test_zip_link_target_that_is_not_utf8_is_a_one_line_error(tmp_path):
    data = zip_bytes([("f", "pkg/a.py", b"1"), ("l", "pkg/l", b"\xff\xfe")])
    assert_refused_cleanly(tmp_path, data, r"symlink 'pkg/l' has a target that is not UTF-8", kind="wheel")
