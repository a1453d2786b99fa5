"""Issue 28: nothing the user made is lost on the paths added last round (--continue, export, the
global ignore file, a half-done resolution, a killed incremental switch, ...). Each test here
failed on the code before its fix (see docs/architecture.md, the safety table)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from synth import META, author_commit, git, numbered

from dsv4_patch import api, incremental
from dsv4_patch.config import load_project
from dsv4_patch.errors import ConflictError, Dsv4Error
from dsv4_patch.gitcmd import Git


@pytest.fixture(autouse=True)
def _private_cache(env, monkeypatch):
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))


def _apply(env, **kw):
    return api.apply(load_project(env.root), ["demo"], out=env.out, **kw)


def _stack_that_conflicts(env, keep_old_tree: bool = True):
    """Two patches at the pin, then a re-pin where upstream rewrote the line patch 1 edits:
    OUT/demo is the tree at the old pin, patch 1 conflicts at the new one."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven")
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    env.repin(env.up.commit("upstream rewrites line 3"))
    if not keep_old_tree:
        shutil.rmtree(env.out / "demo")
    with pytest.raises(ConflictError):
        _apply(env)
    return env.out / ".dsv4" / "failed" / "demo"


def _resolve_by_hand(failed):
    a = failed / "src/a.py"
    assert "<<<<<<<" in a.read_text()
    a.write_text(numbered(60).replace("line 3\n", "line three (upstream)\n"))


# ---------------------------------------------------------------- 1. --continue checks local work
@pytest.mark.parametrize("work", ["edit", "untracked", "stash", "branch"])
def test_continue_refuses_to_swap_over_local_work(env, work):
    failed = _stack_that_conflicts(env)
    tree = env.out / "demo"
    if work == "edit":
        (tree / "src/b.txt").write_text("my edit\n")
    elif work == "untracked":
        (tree / "notes.txt").write_text("mine\n")
    elif work == "stash":
        (tree / "src/b.txt").write_text("stashed\n")
        git(tree, "stash", "-q")
    else:
        git(tree, "branch", "mywork")
        git(tree, "checkout", "-q", "mywork")
        author_commit(tree, {"src/b.txt": "on my branch\n"}, "mine")
        git(tree, "checkout", "-q", "dsv4/demo")
    _resolve_by_hand(failed)
    with pytest.raises(Dsv4Error) as ei:
        _apply(env, resume=True)
    msg = ei.value.one_line()
    assert "\n" not in msg and "lose" in msg and "--force" in msg, msg
    assert {"edit": "uncommitted", "untracked": "uncommitted", "stash": "stash", "branch": "branch mywork"}[work] in msg
    # nothing was touched: the user's work and the resumable attempt are both still there
    assert {"edit": lambda: (tree / "src/b.txt").read_text() == "my edit\n",
            "untracked": lambda: (tree / "notes.txt").exists(),
            "stash": lambda: Git(tree).rev("refs/stash") is not None,
            "branch": lambda: Git(tree).rev("mywork") is not None}[work]()
    assert (failed / ".git/rebase-apply").is_dir()
    res = _apply(env, resume=True, force=True)[0]  # --force says: replace it
    assert "line three (upstream)" in (res.tree / "src/a.py").read_text()


# ---------------------------------------------------------------- 2. export never reverts a changed patch file
def _two_patches(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven")
    return env.apply().tree  # no-op: the tree was built (and adopted) from these files


@pytest.mark.parametrize("how", ["hand-edit", "pulled"])
def test_export_refuses_to_overwrite_a_patch_file_changed_since_the_build(env, how):
    tree = _two_patches(env)
    target = env.root / "patches/demo/three.patch"
    if how == "hand-edit":  # a message line edited by hand
        changed = target.read_bytes().replace(b"Why and how.", b"Why, how, and a note from review.")
    else:  # a `git pull` brought another version of the patch (a different change)
        changed = target.read_bytes().replace(b"+line three\n", b"+line THREE\n")
    target.write_bytes(changed)
    author_commit(tree, {"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n") + "tail\n"}, "[DSV4] Tail",
                  "Why.\n\n" + META)  # work in the tree that export is for
    before = env.patch_bytes()
    with pytest.raises(Dsv4Error) as ei:
        api.export(load_project(env.root), "demo", out=env.out)
    msg = ei.value.one_line()
    assert "\n" not in msg and "three.patch" in msg and "seven.patch" not in msg.split(";")[0] and "--force" in msg, msg
    assert env.patch_bytes() == before  # nothing written, the change to the file is kept
    assert target.read_bytes() == changed
    api.export(load_project(env.root), "demo", out=env.out, check=True)  # --check writes nothing: no refusal
    res = api.export(load_project(env.root), "demo", out=env.out, force=True)
    assert "three.patch" in res.written and target.read_bytes() != changed


def test_export_after_export_and_rebuild_is_not_refused(env):
    """The record follows the files: after an export (adopt), an incremental apply, a continue."""
    tree = _two_patches(env)
    author_commit(tree, {"src/a.py": numbered(60).replace("line 3\n", "line three\n") + "tail\n"}, "[DSV4] Tail",
                  "Why.\n\n" + META)
    api.export(load_project(env.root), "demo", out=env.out)
    git(tree, "commit", "-q", "--amend", "-m", "[DSV4] Tail\n\nWhy, reworded.\n\n" + META)
    api.export(load_project(env.root), "demo", out=env.out)  # its own last export is not "a change"
    (env.root / "patches/demo/three.patch").write_bytes(
        (env.root / "patches/demo/three.patch").read_bytes().replace(b"Why and how.", b"Why and how (edited)."))
    res = env.apply()  # built from the edited file (incremental): the record is the new bytes
    assert res.status == "applied"
    author_commit(res.tree, {"src/b.txt": "x\n"}, "[DSV4] More", "Why.\n\n" + META)
    api.export(load_project(env.root), "demo", out=env.out)


# ---------------------------------------------------------------- 3. the user's global ignore file decides nothing
@pytest.fixture
def home_ignoring_mine(env, monkeypatch):
    """A HOME whose git ignore file (~/.config/git/ignore, git's default core.excludesFile) hides *.mine."""
    home = env.tmp / "home"
    (home / ".config/git").mkdir(parents=True)
    (home / ".config/git/ignore").write_text("*.mine\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


def test_a_file_the_global_ignore_matches_is_local_work_not_a_build_output(env, home_ignoring_mine):
    tree = _two_patches(env)
    (tree / "notes.mine").write_text("my notes\n")
    target = env.root / "patches/demo/seven.patch"  # a patch change: apply would rebuild
    target.write_bytes(target.read_bytes().replace(b"+b seven\n", b"+b SEVEN\n"))
    with pytest.raises(Dsv4Error) as ei:
        env.apply()
    assert "uncommitted changes" in ei.value.one_line() and "--force" in ei.value.one_line()
    assert (tree / "notes.mine").read_text() == "my notes\n"


def test_export_sees_a_new_file_the_global_ignore_matches(env, home_ignoring_mine):
    tree = _two_patches(env)
    (tree / "src/new.mine").write_text("a new file for the patch\n")
    with pytest.raises(Dsv4Error, match=r"untracked file.*src/new\.mine"):
        api.export(load_project(env.root), "demo", out=env.out)


# ---------------------------------------------------------------- 4. a half-done resolution survives a plain apply
@pytest.mark.parametrize("progress", ["edited", "staged", "am-continued"])
def test_a_plain_apply_refuses_while_a_resolution_is_half_done(env, progress):
    failed = _stack_that_conflicts(env, keep_old_tree=False)
    _resolve_by_hand(failed)
    if progress in ("staged", "am-continued"):
        git(failed, "add", "src/a.py")
    if progress == "am-continued":
        git(failed, "-c", "core.hooksPath=/dev/null", "am", "--continue",  # past the hook that advises against it
            env={"GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    mine = (failed / "src/a.py").read_bytes()
    with pytest.raises(Dsv4Error) as ei:
        _apply(env)
    msg = ei.value.one_line()
    assert "\n" not in msg and "--continue" in msg and "--abort" in msg and "--force" in msg, msg
    assert (failed / "src/a.py").read_bytes() == mine  # the resolution is still there
    res = _apply(env, resume=True)[0]  # ... and it can be finished
    assert "line three (upstream)" in (res.tree / "src/a.py").read_text()


def test_an_untouched_stopped_attempt_is_replaced_and_force_discards_a_touched_one(env):
    failed = _stack_that_conflicts(env, keep_old_tree=False)
    with pytest.raises(ConflictError):  # nobody worked there: apply stops again, as before
        _apply(env)
    assert "<<<<<<<" in (failed / "src/a.py").read_text()
    (failed / "src/a.py").write_text("half done\n")
    with pytest.raises(ConflictError):  # --force: the person said to discard it
        _apply(env, force=True)
    assert "<<<<<<<" in (failed / "src/a.py").read_text()


# ---------------------------------------------------------------- 5. a killed incremental switch, then the user's work
def _killed_switch(env, monkeypatch):
    from test_incremental import specs, write_series

    write_series(env, specs([0, 1, 2, 3]))
    tree = env.rebuild().tree
    write_series(env, specs([0, 1, 2, 3], {1: "k"}))  # patch 1 changes: the switch rewrites src/a.py
    with monkeypatch.context() as m:
        m.setattr(incremental, "_finish", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            env.apply()
    assert (tree / ".git/dsv4/switch.json").exists()
    return tree


def test_a_killed_switch_never_overwrites_an_edit_to_a_path_it_was_switching(env, monkeypatch):
    tree = _killed_switch(env, monkeypatch)
    (tree / "src/a.py").write_text("edited after the crash\n")  # a path the switch itself rewrites
    with pytest.raises(Dsv4Error) as ei:
        env.apply()
    assert "src/a.py" in ei.value.one_line() and "--force" in ei.value.one_line()
    assert (tree / "src/a.py").read_text() == "edited after the crash\n"
    env.apply(force=True)  # --force: completed, the edit discarded as asked
    assert (tree / "src/a.py").read_text() != "edited after the crash\n"


def test_a_killed_switch_never_drops_a_commit_made_since(env, monkeypatch):
    tree = _killed_switch(env, monkeypatch)
    mine = author_commit(tree, {"src/b.txt": "committed after the crash\n"}, "mine")
    with pytest.raises(Dsv4Error) as ei:
        env.apply()
    assert "dsv4/demo moved" in ei.value.one_line(), ei.value.one_line()
    assert Git(tree).rev("HEAD") == mine and (tree / "src/b.txt").read_text() == "committed after the crash\n"


def test_a_killed_switch_is_still_completed_when_nobody_touched_it(env, monkeypatch):
    tree = _killed_switch(env, monkeypatch)
    assert env.apply().status == "noop"
    assert Git(tree).out("status", "--porcelain") == ""


# ---------------------------------------------------------------- 8. kills that leave git's own state behind
def _switch_killed_inside_read_tree(env, monkeypatch):
    """The state a kill inside `git read-tree -m -u` leaves: the work tree written, the new index
    still in .git/index.lock (git renames it last), the old index in place, the journal."""
    from test_incremental import specs, write_series

    write_series(env, specs([0, 1, 2, 3]))
    tree = env.rebuild().tree
    write_series(env, specs([0, 1, 2, 3], {1: "k"}))
    real = Git.run

    def run(self, *args, **kw):
        if args[:3] == ("read-tree", "-m", "-u") and self.path == tree:
            old = (tree / ".git/index").read_bytes()
            real(self, *args, **kw)
            (tree / ".git/index").rename(tree / ".git/index.lock")
            (tree / ".git/index").write_bytes(old)
            raise KeyboardInterrupt
        return real(self, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(Git, "run", run)
        with pytest.raises(KeyboardInterrupt):
            env.apply()
    assert (tree / ".git/index.lock").exists() and (tree / ".git/dsv4/switch.json").exists()
    return tree


def test_a_stale_index_lock_of_a_killed_switch_is_cleared(env, monkeypatch):
    from test_incremental import full_rebuild, snapshot

    tree = _switch_killed_inside_read_tree(env, monkeypatch)
    res = env.apply()
    assert res.status == "noop" and not (tree / ".git/index.lock").exists()
    assert snapshot(res) == snapshot(full_rebuild(env))


def test_an_index_lock_a_process_holds_is_left_alone(env, monkeypatch):
    tree = _switch_killed_inside_read_tree(env, monkeypatch)
    with open(tree / ".git/index.lock", "rb"):  # a live process has it open (this one)
        with pytest.raises(Dsv4Error, match=r"index\.lock: a running process \(pid \d+\) holds it"):
            env.apply()
        assert (tree / ".git/index.lock").exists()
    assert env.apply().status == "noop"


def test_continue_after_a_kill_at_the_end_of_git_am_continue(env, monkeypatch):
    """git am --continue commits, then moves its queue on: a kill between the two leaves the patch
    committed while .git/rebase-apply still names it. The next --continue goes on from there (it
    used to advise dropping the patch as one that "changes nothing")."""
    from dsv4_patch import resolve

    failed = _stack_that_conflicts(env, keep_old_tree=False)
    _resolve_by_hand(failed)
    real = resolve._commit_current

    def killed_at_the_end(g, patch):
        saved = env.tmp / "rebase-apply-before"
        shutil.copytree(g.path / ".git/rebase-apply", saved)
        real(g, patch)
        shutil.rmtree(g.path / ".git/rebase-apply", ignore_errors=True)
        shutil.copytree(saved, g.path / ".git/rebase-apply")
        (g.path / ".git/index.lock").write_bytes(b"")  # and a lock nobody holds any more
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(resolve, "_commit_current", killed_at_the_end)
        with pytest.raises(KeyboardInterrupt):
            _apply(env, resume=True)
    assert (failed / ".git/rebase-apply").is_dir() and (failed / ".git/index.lock").exists()
    res = _apply(env, resume=True)[0]
    log = git(res.tree, "log", "--format=%s", "refs/dsv4/base..HEAD").split("\n")
    assert log[:2] == ["[DSV4] Seven", "[DSV4] Three"]  # each patch committed once
    assert "line three (upstream)" in (res.tree / "src/a.py").read_text()
    stored = sorted((env.root / "patches/demo/resolutions").rglob("*.patch"))
    assert len(stored) == 1 and b"+line three (upstream)" in stored[0].read_bytes()  # remembered all the same


def _recorded_resolution_and_a_variant(env, edit):
    """Patch 1 conflicts and is resolved by hand (its resolution recorded); then the same resolution
    rewritten by `edit` on a checkout of the resolved commit: (the recorded file, the variant's bytes)."""
    from dsv4_patch.exporter import strip_trailer

    failed = _stack_that_conflicts(env, keep_old_tree=False)
    _resolve_by_hand(failed)
    tree = _apply(env, resume=True)[0].tree
    [stored] = sorted((env.root / "patches/demo/resolutions").rglob("*.patch"))
    three = git(tree, "log", "--format=%H", "--grep=^\\[DSV4\\] Three", "refs/dsv4/base..HEAD").split()[0]
    scratch = env.tmp / "scratch"
    git(env.tmp, "clone", "-q", str(tree), str(scratch))
    git(scratch, "checkout", "-q", three)
    edit(scratch)
    git(scratch, "add", "-A")
    git(scratch, "commit", "-q", "--amend", "--no-edit")
    variant, _ = strip_trailer(git(scratch, "format-patch", "-1", "--stdout", "--full-index", "--no-signature",
                                   "--keep-subject", "--no-stat", "HEAD").encode())
    return stored, variant


# ---------------------------------------------------------------- 7. a recorded resolution changes only its patch's files
@pytest.mark.parametrize("extra", ["another-file", "escaping-link"])
def test_a_resolution_that_changes_more_than_its_patch_is_refused(env, extra):
    def plus_something_else(scratch):  # a pull request's version: the same change plus something else
        if extra == "another-file":
            (scratch / "src/evil.py").write_text("import os\n")
        else:
            (scratch / "src/a.py").unlink()  # the patch's own file, made a link out of the tree
            (scratch / "src/a.py").symlink_to("../../../outside")

    stored, evil = _recorded_resolution_and_a_variant(env, plus_something_else)
    stored.write_bytes(evil)
    shutil.rmtree(env.out / "demo")
    def files():
        return {p: p.read_bytes() for p in sorted((env.root / "patches").rglob("*")) if p.is_file()}

    before = files()
    with pytest.raises(Dsv4Error) as ei:
        _apply(env)
    msg = ei.value.one_line()
    assert "\n" not in msg and str(stored) in msg, msg
    assert (("src/evil.py" in msg) if extra == "another-file" else ("points outside" in msg)), msg
    assert not (env.out / "demo").exists() and files() == before


@pytest.mark.parametrize("also_current", [False, True])
def test_a_resolution_recorded_for_an_earlier_version_of_the_patch_is_passed_over(env, also_current):
    """A resolution recorded before the patch was edited to change fewer files (another key, other
    files) is not a resolution of this version: it is never laid and is not an error. The current
    one, when recorded, is used; else the conflict is left to the person, as with none recorded."""
    def also_another_file(scratch):  # as an earlier version of the patch had it
        (scratch / "src/dropped-since.py").write_text("x = 1\n")

    current, stale = _recorded_resolution_and_a_variant(env, also_another_file)
    (current.parent / ("0" * 64 + ".patch")).write_bytes(stale)  # another key: another patch version
    if not also_current:
        current.unlink()
    shutil.rmtree(env.out / "demo")
    if also_current:
        built = _apply(env)[0].tree
        assert "line three (upstream)" in (built / "src/a.py").read_text()
        assert not (built / "src/dropped-since.py").exists()
    else:
        with pytest.raises(ConflictError):  # not PatchFormatError: nothing is wrong with the project
            _apply(env)
        assert "<<<<<<<" in (env.out / ".dsv4/failed/demo/src/a.py").read_text()


# ---------------------------------------------------------------- 6. --out on another file system than the cache
def test_out_on_another_file_system_than_the_cache(env):
    """`git clone --local` dies where it cannot hard-link (another file system, a read-only
    bind-mounted cache) instead of copying; apply must copy there. /dev/shm (tmpfs) is the other
    file system here."""
    import os
    import tempfile

    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(env.tmp).st_dev:
        pytest.skip("no second file system (tmpfs /dev/shm) next to the test folder")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    elsewhere = Path(tempfile.mkdtemp(prefix="dsv4-out-", dir=shm))
    try:
        env.out = elsewhere / "trees"
        res = env.apply()
        assert res.status == "applied" and "line three" in (res.tree / "src/a.py").read_text()
        assert os.stat(res.tree).st_dev != os.stat(env.cache.root).st_dev
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


# ---------------------------------------------------------------- 11. archives: a corrupt header, a link into .git
def _tar_with_a_corrupt_second_header() -> bytes:
    import gzip
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in (("a.py", b"A = 1\n"), ("b.py", b"B = 2\n"), ("c.py", b"C = 3\n")):
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    raw = bytearray(buf.getvalue())
    second = 512 + 512  # the first header and its one data block
    assert raw[second:second + 12] == b"pkg-1.0/b.py"
    raw[second + 8] ^= 0x20  # 'b' -> 'B': the header's checksum no longer matches
    return gzip.compress(bytes(raw), mtime=0)


def test_a_corrupt_tar_header_between_members_fails_like_gnu_tar(tmp_path):
    import subprocess

    from test_archive_safety import assert_refused_cleanly

    data = _tar_with_a_corrupt_second_header()
    if shutil.which("tar"):  # GNU tar: "Skipping to next header", exit 2
        (tmp_path / "probe.tar.gz").write_bytes(data)
        assert subprocess.run(["tar", "-tzf", str(tmp_path / "probe.tar.gz")], capture_output=True).returncode == 2
        (tmp_path / "probe.tar.gz").unlink()
    err = assert_refused_cleanly(tmp_path, data, r"pkg-1\.0\.tar\.gz: not a readable tar archive")
    assert "header" in err.message, err.message


@pytest.mark.parametrize("target", [".git", ".git/hooks", "sub/../.git", ".GIT/config", "d/.git"])
def test_an_archive_symlink_into_dot_git_is_refused(tmp_path, target):
    from test_archive_safety import assert_refused_cleanly, tar_bytes

    members = [("f", "x", b"x\n"), ("l", "link", target)] + ([("l", "d", ".")] if target.startswith("d/") else [])
    assert_refused_cleanly(tmp_path, tar_bytes(members), r"symlink link -> .* points into \.git")


# ---------------------------------------------------------------- tracebacks that must be one line
def test_a_base64_error_in_an_rfc2047_subject_is_a_format_error(env):
    """email raises HeaderParseError (not a ValueError) for a base64 word of the wrong length."""
    from dsv4_patch.errors import PatchFormatError

    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    p = env.root / "patches/demo/three.patch"
    p.write_bytes(p.read_bytes().replace(b"Subject: [DSV4] Three", b"Subject: =?utf-8?b?A?=", 1))
    shutil.rmtree(env.out / "demo")
    with pytest.raises(PatchFormatError) as ei:
        env.apply()
    assert "three.patch" in ei.value.one_line() and "RFC 2047" in ei.value.one_line()


def _cli(env, *args, extra_env=None):
    import os
    import subprocess
    import sys

    tool = Path(__file__).resolve().parents[2] / "tools" / "applypatch.py"
    return subprocess.run([sys.executable, str(tool), *args, "--project", str(env.root)], capture_output=True,
                          text=True, env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root), "COLUMNS": "80",
                                          **(extra_env or {})})


def test_no_git_on_path_is_one_line(env):
    nothing = env.tmp / "empty-bin"
    nothing.mkdir()
    p = _cli(env, "apply", "demo", extra_env={"PATH": str(nothing)})
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "git" in p.stderr and "PATH" in p.stderr and len(p.stderr.strip().splitlines()) <= 2, p.stderr


def test_export_into_a_read_only_patch_folder_is_one_line_and_writes_nothing(env, monkeypatch):
    import errno
    import os

    tree = _two_patches(env)
    author_commit(tree, {"src/b.txt": "more\n"}, "[DSV4] More", "Why.\n\n" + META)
    folder = str(env.root / "patches")
    real_open = os.open

    def read_only_mount(path, flags, *a, **k):  # what a read-only mount answers (root ignores chmod)
        if str(path).startswith(folder) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)

    before = {p: p.read_bytes() for p in (env.root / "patches").rglob("*") if p.is_file()}
    monkeypatch.setattr(os, "open", read_only_mount)
    with pytest.raises(Dsv4Error) as ei:
        api.export(load_project(env.root), "demo", out=env.out)
    monkeypatch.undo()
    msg = ei.value.one_line()
    assert "\n" not in msg and "Read-only file system" in msg and "nothing written" in msg, msg
    assert {p: p.read_bytes() for p in (env.root / "patches").rglob("*") if p.is_file()} == before


def test_an_ascii_only_stdout_gets_every_line(env):
    """A terminal or pipe that takes ASCII only (PYTHONIOENCODING=ascii, an old LANG=C Python):
    the em dash of apply's result line, a non-ASCII path, are replaced, never a traceback."""
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    for _ in range(2):  # the second is a no-op, whose line carries a note after an em dash
        p = _cli(env, "apply", "demo", extra_env={"PYTHONIOENCODING": "ascii"})
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert "demo" in p.stdout
    assert "nothing changed" in p.stdout


def test_export_judges_a_tree_built_before_the_record_by_what_its_build_made(env):
    from dsv4_patch.tree import read_state, write_state

    _two_patches(env)
    tree = env.rebuild().tree  # built from the files: made == commits
    st = read_state(tree)
    del st["patch_files"]  # as an older version wrote it: "made" holds the build's bytes
    write_state(tree, st)
    target = env.root / "patches/demo/three.patch"
    target.write_bytes(target.read_bytes().replace(b"Why and how.", b"Why and how (by hand)."))
    with pytest.raises(Dsv4Error, match="three.patch"):
        api.export(load_project(env.root), "demo", out=env.out)
    st["commits"] = st["commits"][:1]  # exported by the older version since: "made" says nothing now
    write_state(tree, st)
    api.export(load_project(env.root), "demo", out=env.out)


def test_an_empty_commit_on_the_stack_branch_is_one_line_at_export(env):
    tree = _two_patches(env)
    git(tree, "commit", "-q", "--allow-empty", "-m", "[DSV4] Nothing\n\nWhy.\n\n" + META)
    before = env.patch_bytes()
    with pytest.raises(Dsv4Error) as ei:
        api.export(load_project(env.root), "demo", out=env.out)
    msg = ei.value.one_line()
    assert "\n" not in msg and "empty" in msg and "Nothing" in msg, msg
    assert env.patch_bytes() == before


@pytest.mark.parametrize("bad", ["garbage", "folder", "no-diff"])
def test_a_bad_resolution_file_is_one_line_naming_it(env, bad):
    failed = _stack_that_conflicts(env, keep_old_tree=False)
    _resolve_by_hand(failed)
    _apply(env, resume=True)
    [stored] = sorted((env.root / "patches/demo/resolutions").rglob("*.patch"))
    if bad == "garbage":
        stored.write_bytes(b"\x00\xff not a patch at all\n")
    elif bad == "folder":
        stored.unlink()
        stored.mkdir()
    else:
        raw = stored.read_bytes()
        stored.write_bytes(raw[: raw.index(b"\ndiff --git ") + 1])
    shutil.rmtree(env.out / "demo")
    with pytest.raises(Dsv4Error) as ei:
        _apply(env)
    msg = ei.value.one_line()
    assert "\n" not in msg and str(stored) in msg, msg


# ---------------------------------------------------------------- 9. renames and copies to paths git quotes
@pytest.mark.parametrize("new", ["src/n\u00e9w.txt", "src/with\ttab.txt", "caf\u00e9/b.txt", 'src/q"uote.txt'])
def test_a_rename_to_a_quoted_path_round_trips(env, new):
    """export writes what apply and check accept: a rename whose new name git quotes (non-ASCII,
    a tab, a quote) with an unquoted old name on the same `diff --git` line."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    content = numbered(30, "b")
    env.author({"src/b.txt": None, new: content.replace("b 7\n", "b seven\n")}, "[DSV4] Move b")
    raw = (env.root / "patches/demo/move-b.patch").read_bytes()
    assert b"rename from src/b.txt" in raw and b'"b/' in raw  # the shape that was refused
    assert [f.message for f in api.check(load_project(env.root))] == []
    res = env.rebuild()
    assert (res.tree / new).read_text() == content.replace("b 7\n", "b seven\n") and not (res.tree / "src/b.txt").exists()
    before = env.patch_bytes()
    env.export()
    assert env.patch_bytes() == before  # apply -> export is byte-identical


# ---------------------------------------------------------------- 12. smaller ones
def test_abort_takes_back_the_resolutions_recorded_during_the_attempt(env):
    """Two patches that conflict at the new pin: the first resolved and recorded by --continue,
    which stops at the second; --abort drops the attempt and what it recorded, nothing else."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven")
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    env.up.write("src/b.txt", numbered(30, "b").replace("b 7\n", "b 7 (upstream)\n"))
    env.repin(env.up.commit("upstream rewrites both lines"))
    older = env.root / "patches/demo/resolutions/other/kept-from-before.patch"  # not the attempt's
    older.parent.mkdir(parents=True)
    older.write_bytes(b"an older resolution\n")
    with pytest.raises(ConflictError):
        _apply(env)
    failed = env.out / ".dsv4/failed/demo"
    _resolve_by_hand(failed)
    with pytest.raises(ConflictError, match="seven.patch"):  # Three recorded; Seven stops (none fits it)
        _apply(env, resume=True)
    assert list((env.root / "patches/demo/resolutions/three").glob("*.patch"))
    api.abort_apply(load_project(env.root), "demo", out=env.out)
    assert not (env.root / "patches/demo/resolutions/three").exists()
    assert older.read_bytes() == b"an older resolution\n"


def test_export_refuses_a_symlink_out_of_the_tree_that_apply_would_refuse(env):
    import os

    tree = _two_patches(env)
    os.symlink("../../outside", tree / "src/escape")
    git(tree, "add", "src/escape")
    git(tree, "commit", "-q", "-m", "[DSV4] A link\n\nWhy.\n\n" + META)
    before = env.patch_bytes()
    with pytest.raises(Dsv4Error) as ei:
        api.export(load_project(env.root), "demo", out=env.out)
    msg = ei.value.one_line()
    assert "\n" not in msg and "src/escape" in msg and "outside the tree" in msg, msg
    assert env.patch_bytes() == before


def test_a_patch_without_a_date_is_refused_not_dated_by_the_clock(env):
    from dsv4_patch.errors import PatchFormatError

    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    p = env.root / "patches/demo/three.patch"
    p.write_bytes(re.sub(rb"^Date: .*\n", b"", p.read_bytes(), count=1, flags=re.M))
    shutil.rmtree(env.out / "demo")
    with pytest.raises(PatchFormatError, match=r"three\.patch:2: no Date: header"):
        env.apply()
    assert any("no Date: header" in f.message for f in api.check(load_project(env.root)))


def test_an_edit_that_drops_an_ignore_rule_does_not_block_the_next_apply(env):
    """Build outputs ignored by a rule a patch adds stay through the in-place switch; when an edited
    patch drops the rule they would look like the user's files and block every later apply.
    They are discarded as a rebuild discards ignored files, and the result says so."""
    from test_incremental import specs, write_series

    series = specs([0, 1, 2])
    series[0][1][".gitignore"] = "*.out\n"
    write_series(env, series)
    tree = env.rebuild().tree
    (tree / "src/build.out").write_text("a build output\n")
    edited = specs([0, 1, 2], {2: "x"})
    edited[0][1][".gitignore"] = "*.log\n"  # the rule for *.out dropped (patch 0 changes: the switch redoes all)
    write_series(env, edited)
    res = env.apply()
    assert "incremental" in res.note and "src/build.out" not in Git(tree).out("status", "--porcelain")
    assert "1 build output" in res.note, res.note
    assert not (tree / "src/build.out").exists()
    assert env.apply().status == "noop"  # not blocked


def test_no_3way_is_not_a_no_op_on_a_tree_the_3way_fallback_built(env):
    env.author({"src/a.py": numbered(60).replace("line 10\n", "line ten\n")}, "[DSV4] Ten")
    env.up.write("src/a.py", numbered(60).replace("line 12\n", "line 12 (upstream)\n"))  # in the patch's context
    env.repin(env.up.commit("upstream edits the next line"))
    res = env.apply(force=True)  # only the 3-way merge applies it
    assert res.status == "applied" and "line ten" in (res.tree / "src/a.py").read_text()
    with pytest.raises(ConflictError):
        env.apply(threeway=False)  # what --no-3way says: no merge fallback; this patch needs one
    assert env.apply().status == "noop"  # the refused build left the default one as it was


def test_a_full_disk_during_git_am_is_said_not_called_a_conflict(env, monkeypatch):
    from dsv4_patch import tree as tree_mod

    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    shutil.rmtree(env.out / "demo")
    monkeypatch.setattr(incremental, "fast_commits", lambda *a, **k: ([], "test: git am only"))
    monkeypatch.setattr(tree_mod, "_am", lambda *a, **k: (128, "error: unable to write file src/a.py\n"
                                                             "fatal: write error: No space left on device\n"))
    with pytest.raises(Dsv4Error) as ei:
        env.apply()
    assert not isinstance(ei.value, ConflictError)
    assert "No space left on device" in ei.value.one_line() and "conflict" not in ei.value.one_line()



# ---------------------------------------------------------------- kills at every git call
class _Killed(BaseException):
    pass


def _killing_git(monkeypatch, at: int, after: bool):
    """Git.run raising (as a kill would) at its `at`-th call: before it runs, or after it ran."""
    real, n = Git.run, [0]

    def run(self, *args, **kw):
        n[0] += 1
        if n[0] == at and not after:
            raise _Killed()
        r = real(self, *args, **kw)
        if n[0] == at and after:
            raise _Killed()
        return r

    monkeypatch.setattr(Git, "run", run)
    return n


def test_a_kill_at_every_git_call_of_the_incremental_switch(env, monkeypatch):
    """Each git call of an incremental apply, killed before and after it runs: the next apply
    completes or redoes it, and the tree is the one a full rebuild makes (same commits and files)."""
    from test_incremental import full_rebuild, snapshot, specs, write_series

    write_series(env, specs([0, 1, 2, 3]))
    built = env.rebuild().tree
    pristine = env.tmp / "pristine"
    shutil.copytree(built, pristine, symlinks=True)
    write_series(env, specs([0, 1, 2, 3], {2: "k"}))
    want = snapshot(full_rebuild(env))
    with monkeypatch.context() as m:
        calls = _killing_git(m, 0, False)
        assert env.apply().status == "applied"
    total = calls[0]
    print(f"incremental apply: {total} git calls, each killed before and after it ran")
    for at in range(1, total + 1):
        for after in (False, True):
            shutil.rmtree(built)
            shutil.copytree(pristine, built, symlinks=True)
            with monkeypatch.context() as m:
                _killing_git(m, at, after)
                try:
                    env.apply()
                except _Killed:
                    pass
            res = env.apply()
            assert snapshot(res) == want, (at, after)


def test_a_kill_at_every_git_call_of_continue(env, monkeypatch):
    """Each git call of `apply --continue`, killed before and after it runs: running --continue
    again (while the stopped attempt is there) finishes it, each patch committed once, the
    resolution remembered, the user's resolution never lost."""
    failed = _stack_that_conflicts(env, keep_old_tree=False)
    _resolve_by_hand(failed)
    saved_out, saved_patches = env.tmp / "saved-out", env.tmp / "saved-patches"
    shutil.copytree(env.out, saved_out, symlinks=True)
    shutil.copytree(env.root / "patches", saved_patches, symlinks=True)

    def restore():
        for live, saved in ((env.out, saved_out), (env.root / "patches", saved_patches)):
            shutil.rmtree(live)
            shutil.copytree(saved, live, symlinks=True)

    with monkeypatch.context() as m:
        calls = _killing_git(m, 0, False)
        _apply(env, resume=True)
    total = calls[0]
    print(f"apply --continue: {total} git calls, each killed before and after it ran")
    for at in range(1, total + 1):
        for after in (False, True):
            restore()
            with monkeypatch.context() as m:
                _killing_git(m, at, after)
                try:
                    _apply(env, resume=True)
                except _Killed:
                    pass
            if failed.exists():
                _apply(env, resume=True)
            tree = env.out / "demo"
            log = git(tree, "log", "--format=%s", "refs/dsv4/base..HEAD").split("\n")
            assert log[:2] == ["[DSV4] Seven", "[DSV4] Three"], (at, after, log)
            assert "line three (upstream)" in (tree / "src/a.py").read_text(), (at, after)
            assert list((env.root / "patches/demo/resolutions").rglob("*.patch")), (at, after)
            assert _apply(env)[0].status == "noop", (at, after)
