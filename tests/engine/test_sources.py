"""Sources: safe archive import (deterministic, verified), git mirrors, path checkouts, diagnostics."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from synth import Upstream, git, numbered, refuse_folder_flocks

from dsv4_patch.config import SourceSpec, StackConfig
from dsv4_patch.errors import SourceError
from dsv4_patch.gitcmd import Git
from dsv4_patch.sources import Cache, archive, gitsource, materialize


def stack(tmp: Path, sources: list[SourceSpec], commit="v1.0", tag="v1.0") -> StackConfig:
    return StackConfig("demo", "https://example.invalid/demo", tag, commit, None, tmp / "patches/demo", sources)


def make_tar(path: Path, members: dict[str, bytes], top="pkg-1.0", extra=None) -> str:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.uid = info.gid = 1000
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tf.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tf.addfile(info)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed_cache(cache: Cache, path: Path) -> None:
    """Put an archive where `download` looks first (tests never touch the network)."""
    dest = cache.dir("archives") / path.name
    dest.write_bytes(path.read_bytes())


def sdist_spec(sha: str, **kw) -> SourceSpec:
    return SourceSpec("sdist", {"package": "pkg", "version": "1.0", "sha256": sha, **kw})


def test_sdist_import_is_deterministic_and_has_upstream_blob_ids(tmp_path):
    files = {"pkg/a.py": numbered(10).encode(), "run.sh": b"#!/bin/sh\n", "deep/x/y.txt": b"y\n"}
    sha = make_tar(tmp_path / "pkg-1.0.tar.gz", files)
    commits = []
    for i in range(2):
        cache = Cache(tmp_path / f"cache{i}")
        seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
        base = materialize(stack(tmp_path, [sdist_spec(sha)]), cache)
        commits.append(base.commit)
    assert commits[0] == commits[1]
    g = Git(base.git_dir)
    assert g.out("ls-tree", "-r", "--name-only", base.commit).split() == ["deep/x/y.txt", "pkg/a.py", "run.sh"]
    assert "100755" in g.out("ls-tree", base.commit, "run.sh")
    # same content -> same blob id as a git repo holding the file (so patches 3-way merge)
    assert g.out("rev-parse", f"{base.commit}:pkg/a.py") == git(tmp_path, "hash-object", "--stdin", input=files["pkg/a.py"]).strip()


def test_sha256_mismatch_is_refused_and_nothing_is_left(tmp_path):
    make_tar(tmp_path / "pkg-1.0.tar.gz", {"a": b"a"})
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
    s = stack(tmp_path, [sdist_spec("0" * 64)])
    # the cached copy fails verification and is dropped; the index is then asked (and unreachable)
    os.environ["DSV4_PYPI_INDEX"] = "http://127.0.0.1:9/simple"
    try:
        with pytest.raises(SourceError):
            materialize(s, cache)
    finally:
        del os.environ["DSV4_PYPI_INDEX"]
    assert not (cache.root / "archives/pkg-1.0.tar.gz").exists()
    assert not any((cache.root / "imports").iterdir()) if (cache.root / "imports").exists() else True


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "device", "hardlink"])
def test_tampered_archives_are_refused_without_leftovers(tmp_path, kind):
    extra = []
    if kind == "dotdot":
        info = tarfile.TarInfo("pkg-1.0/../../evil.txt")
    elif kind == "absolute":
        info = tarfile.TarInfo("/tmp/evil.txt")
    elif kind == "symlink":
        info = tarfile.TarInfo("pkg-1.0/link")
        info.type, info.linkname = tarfile.SYMTYPE, "../../../etc/passwd"
    elif kind == "device":
        info = tarfile.TarInfo("pkg-1.0/dev")
        info.type = tarfile.CHRTYPE
    else:
        info = tarfile.TarInfo("pkg-1.0/hl")
        info.type, info.linkname = tarfile.LNKTYPE, "pkg-1.0/a"
    extra.append(info)
    sha = make_tar(tmp_path / "pkg-1.0.tar.gz", {"a": b"a"}, extra=extra)
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
    with pytest.raises(SourceError, match="pkg-1.0.tar.gz"):
        archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache)
    assert not any((cache.root / "imports").iterdir())
    assert not any((cache.root / "tmp").iterdir())
    assert not (tmp_path / "evil.txt").exists()


def test_in_tree_symlink_is_kept(tmp_path):
    info = tarfile.TarInfo("pkg-1.0/docs/link")
    info.type, info.linkname = tarfile.SYMTYPE, "../a"
    sha = make_tar(tmp_path / "pkg-1.0.tar.gz", {"a": b"a"}, extra=[info])
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
    base = archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache)
    assert "120000" in Git(base.git_dir).out("ls-tree", "-r", base.commit, "docs/link")


def test_recorded_commit_id_must_match_the_pin(tmp_path):
    ver = b"__commit_id__: str | None\n__commit_id__ = commit_id = 'gabc1234def'\n"
    sha = make_tar(tmp_path / "pkg-1.0.tar.gz", {"pkg/_version.py": ver})
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
    spec = sdist_spec(sha, commit_file="pkg/_version.py")
    with pytest.raises(SourceError, match="built from commit abc1234def, the pin says 9999999"):
        archive.materialize(stack(tmp_path, [], commit="9999999"), spec, cache)
    base = archive.materialize(stack(tmp_path, [], commit="abc1234def"), spec, cache)
    assert "recorded-commit: abc1234def" in Git(base.git_dir).out("log", "-1", "--format=%B", base.commit)


def test_wheel_is_rerooted_and_dist_info_dropped(tmp_path):
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("pkg/__init__.py", "X = 1\n")
        zf.writestr("pkg/sub/m.py", "Y = 2\n")
        zf.writestr("pkg-1.0.dist-info/RECORD", "")
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, whl)
    spec = SourceSpec("wheel", {"package": "pkg", "version": "1.0", "sha256": sha, "filename": whl.name,
                                "reroot": {"pkg/": "python/pkg/"}, "exclude": ["*.dist-info/*"]})
    base = archive.materialize(stack(tmp_path, []), spec, cache)
    assert Git(base.git_dir).out("ls-tree", "-r", "--name-only", base.commit).split() == \
        ["python/pkg/__init__.py", "python/pkg/sub/m.py"]


def test_git_source_uses_a_shared_mirror_and_the_mirror_variable(tmp_path, monkeypatch):
    up = Upstream(tmp_path / "up")
    up.write("f.txt", "one\n")
    c1 = up.commit("one")
    git(up.path, "tag", "v1.0")
    bare = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--bare", str(up.path), str(bare))
    spec = SourceSpec("git", {"url": "https://unreachable.invalid/demo.git", "mirror_env": "DEMO_MIRROR"})
    monkeypatch.setenv("DEMO_MIRROR", str(bare))
    cache = Cache(tmp_path / "cache")
    base = materialize(stack(tmp_path, [spec], commit=c1), cache)
    assert base.commit == c1 and "mirror.git" in base.source
    # full history and blobs (3-way needs them), not shallow
    g = Git(base.git_dir)
    assert g.out("rev-parse", "--is-shallow-repository") == "false"
    assert g.out("cat-file", "-t", f"{c1}:f.txt") == "blob"
    # second time: offline, from the shared mirror
    monkeypatch.delenv("DEMO_MIRROR")
    assert materialize(stack(tmp_path, [spec], commit=c1), cache, offline=True).commit == c1
    # an abbreviated pin resolves through its tag
    assert gitsource.fetch_ref(stack(tmp_path, [spec], commit=c1[:9]), spec, cache, c1[:9])[1] == c1


def test_unreachable_git_url_gives_one_line_per_source_with_what_to_set(tmp_path):
    specs = [SourceSpec("git", {"url": str(tmp_path / "nowhere.git"), "mirror_env": "DEMO_MIRROR"}),
             SourceSpec("path", {"path": str(tmp_path / "no-checkout")})]
    with pytest.raises(SourceError) as ei:
        materialize(stack(tmp_path, specs, commit="a" * 40), Cache(tmp_path / "cache"))
    lines = ei.value.details.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("  git:") and "set DEMO_MIRROR or DSV4_GIT_MIRROR_DEMO" in lines[0]
    assert lines[1].startswith("  path:") and "does not exist" in lines[1]


def test_path_source_is_read_only(tmp_path):
    up = Upstream(tmp_path / "up")
    up.write("f.txt", "one\n")
    c = up.commit()
    before = sorted(p.name for p in (up.path / ".git").iterdir())
    base = materialize(stack(tmp_path, [SourceSpec("path", {"path": str(up.path)})], commit=c), Cache(tmp_path / "c"))
    assert base.commit == c
    assert sorted(p.name for p in (up.path / ".git").iterdir()) == before


@pytest.mark.parametrize("fs", ["local", "folders-cannot-be-locked"])
def test_a_second_import_of_the_same_archive_waits_and_keeps_the_first(tmp_path, monkeypatch, fs):
    """Two processes (checkouts, test workers) asking for one release at once: the second waits for
    the first's import and uses it. Before, it imported again and replaced the repository that the
    first had already returned, under a `git clone --local` reading from it. Where folders cannot be
    locked, a lock file in the cache stands in and excludes just the same (flocks on two opens of
    one file exclude each other even within one process)."""
    import threading

    if fs != "local":
        if not Path("/proc/self/fd").is_dir():
            pytest.skip("needs /proc to tell a folder's descriptor from a file's")
        refuse_folder_flocks(monkeypatch)

    sha = make_tar(tmp_path / "pkg-1.0.tar.gz", {"pkg/a.py": numbered(5).encode()})
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
    inside, release = threading.Event(), threading.Event()
    reads = []
    real = archive.read_members

    def slow_read(*a, **kw):  # the first import stops inside its read until the second has started
        reads.append(1)
        if len(reads) == 1:
            inside.set()
            assert release.wait(30)
        yield from real(*a, **kw)

    monkeypatch.setattr(archive, "read_members", slow_read)
    got = {}

    def first():
        got["first"] = archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache)
        (got["first"].git_dir / "first-was-here").write_text("")  # what a reader's clone would see

    t1 = threading.Thread(target=first)
    t1.start()
    assert inside.wait(30)
    t2 = threading.Thread(target=lambda: got.setdefault("second", archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache)))
    t2.start()
    t2.join(0.5)
    assert t2.is_alive()  # waiting for the first import, not importing beside it
    release.set()
    t1.join(30)
    t2.join(30)
    assert reads == [1]
    assert got["second"].commit == got["first"].commit and got["second"].note == "cached import"
    assert (got["first"].git_dir / "first-was-here").is_file()  # the first's repository was not replaced
    assert (cache.root / "locks" / "imports.lock").is_file() == (fs != "local")


@pytest.mark.parametrize("refs", ["loose", "packed"])
def test_a_finished_import_git_fails_to_read_is_kept(tmp_path, monkeypatch, refs):
    """A finished import whose ref git could not read for a moment (out of memory, too many open
    files) is not taken for a half-made one and deleted under its readers: the run stops, saying so."""
    sha = make_tar(tmp_path / "pkg-1.0.tar.gz", {"pkg/a.py": numbered(5).encode()})
    cache = Cache(tmp_path / "cache")
    seed_cache(cache, tmp_path / "pkg-1.0.tar.gz")
    first = archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache)
    if refs == "packed":
        git(first.git_dir, "pack-refs", "--all")
        assert not (first.git_dir / "refs" / "dsv4" / "import").exists()
    (first.git_dir / "reader-was-here").write_text("")
    monkeypatch.setattr(Git, "rev", lambda self, *a, **kw: None)
    with pytest.raises(SourceError, match="could not read this finished import"):
        archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache)
    assert (first.git_dir / "reader-was-here").is_file()
    monkeypatch.undo()
    assert archive.materialize(stack(tmp_path, []), sdist_spec(sha), cache).commit == first.commit
