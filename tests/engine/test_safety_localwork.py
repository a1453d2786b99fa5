"""Issue 11 items 3-5: local work is never discarded without --force; one lock per stack;
bookkeeping files survive a torn write."""

from __future__ import annotations

import threading
import time

import pytest
from synth import author_commit, git, numbered, refuse_folder_flocks

from dsv4_patch import tree as tree_mod
from dsv4_patch.errors import Dsv4Error
from dsv4_patch.exporter import export_stack
from dsv4_patch.gitcmd import Git


def one_patch(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.rebuild()
    return env.out / "demo"


def refuses(env, *words):
    with pytest.raises(Dsv4Error) as ei:
        env.apply()
    msg = ei.value.one_line()
    for w in words:
        assert w in msg, msg
    assert "\n" not in msg and "--force" in msg
    return msg


def test_commits_on_another_branch_are_not_discarded(env):
    t = one_patch(env)
    git(t, "checkout", "-q", "-b", "mywork")
    author_commit(t, {"src/b.txt": "mine\n"}, "my work")
    git(t, "checkout", "-q", "dsv4/demo")
    # change a patch so apply would really rebuild
    env.stack.series_path.write_text(env.stack.series_path.read_text() + "# touched\n")
    refuses(env, "branch mywork")
    assert Git(t).rev("mywork")  # still there
    env.apply(force=True)


def test_a_stash_is_not_discarded(env):
    t = one_patch(env)
    (t / "src/b.txt").write_text("stashed edit\n")
    git(t, "stash", "-q")
    refuses(env, "stash")
    assert Git(t).rev("refs/stash")


def test_a_user_tag_is_not_discarded(env):
    t = one_patch(env)
    git(t, "tag", "keep-me", "HEAD")
    refuses(env, "tag keep-me")


def test_upstream_tags_are_not_local_work(env):
    git(env.up.path, "tag", "v1.0")
    res = env.rebuild()
    assert Git(res.tree).rev("v1.0")
    assert env.apply().status == "noop"


def test_an_am_in_progress_is_not_discarded(env, tmp_path):
    t = one_patch(env)
    bad = tmp_path / "bad.patch"
    author_commit(t, {"src/a.py": numbered(60).replace("line 9\n", "line nine\n")}, "next")
    raw = git(t, "format-patch", "-1", "--stdout").replace("line nine", "line NINE").replace("-line 9", "-line 99")
    git(t, "reset", "-q", "--hard", "HEAD^")
    bad.write_text(raw)
    ident = {"GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # a HOME may have none
    p = __import__("subprocess").run(["git", "am", str(bad)], cwd=t, capture_output=True,
                                     env={**__import__("os").environ, **ident})
    assert p.returncode != 0 and (t / ".git/rebase-apply").exists()
    refuses(env, "`git am` or rebase in progress")


def test_ignored_build_outputs_may_go_but_the_result_says_so(env):
    t = one_patch(env)
    (t / ".git/info").mkdir(exist_ok=True)
    (t / ".git/info/exclude").write_text("*.o\n")
    (t / "src/x.o").write_bytes(b"\0")
    env.up.write("src/new.txt", "upstream moved\n")
    env.repin(env.up.commit("new pin"))  # a new base: the tree is rebuilt, not switched in place
    res = env.apply()
    assert res.status == "applied" and "discarded 1 ignored file" in res.note, res.note
    assert not (t / "src/x.o").exists()


def test_an_in_place_update_keeps_ignored_files(env):
    t = one_patch(env)
    (t / ".git/info").mkdir(exist_ok=True)
    (t / ".git/info/exclude").write_text("*.o\n")
    (t / "src/x.o").write_bytes(b"\0")
    p = env.stack.patch_dir / "three.patch"
    p.write_bytes(p.read_bytes().replace(b"Why and how.", b"Why and how, reworded."))
    res = env.apply()
    assert res.status == "applied" and (t / "src/x.o").read_bytes() == b"\0"


def test_export_waits_for_a_running_apply_of_the_same_stack(env, monkeypatch):
    """Export, apply, bump and pin of one stack take one lock: an export that starts while apply
    runs finishes after it."""
    t = one_patch(env)
    author_commit(t, {"src/b.txt": numbered(30, "b").replace("b 4\n", "b four\n")}, "[DSV4] Four", "Why.\n")
    other = env.tmp / "other-out"
    order = []
    real_am = tree_mod._make_commits  # every fresh build makes its commits here (fast path or git am)

    def slow_am(*a, **k):
        th = threading.Thread(target=lambda: (export_stack(env.stack, t), order.append("export")))
        th.start()
        time.sleep(0.5)
        order.append("apply")
        r = real_am(*a, **k)
        slow_am.thread = th
        return r

    monkeypatch.setattr(tree_mod, "_make_commits", slow_am)
    tree_mod.build_tree(env.stack, other, cache=env.cache)
    slow_am.thread.join(30)
    assert order == ["apply", "export"]


def test_the_lock_is_reentrant_and_per_stack(env):
    from dsv4_patch.locks import stack_lock

    with stack_lock(env.stack):
        with stack_lock(env.stack):  # pin -> build_tree takes it twice in one thread
            res = env.apply()
    assert res.tree.exists()


def test_an_empty_swap_journal_is_repaired_with_one_line(env):
    one_patch(env)
    (env.out / ".dsv4" / "swap-demo.json").write_text("")
    res = env.apply()
    assert res.status == "noop" and "damaged swap journal" in res.note
    assert not (env.out / ".dsv4" / "swap-demo.json").exists()


def test_a_torn_swap_journal_with_the_tree_moved_aside_restores_it(env):
    t = one_patch(env)
    head = Git(t).rev("HEAD")
    old = env.out / ".dsv4" / "old-demo-12345"
    t.rename(old)
    (env.out / ".dsv4" / "swap-demo.json").write_text('{"target": "')
    res = env.apply()
    assert "restored from the previous tree" in res.note
    assert Git(res.tree).rev("HEAD") == head


def test_a_torn_state_file_is_rebuilt_when_the_tree_is_what_the_patches_give(env):
    t = one_patch(env)
    f = t / ".git/dsv4/state.json"
    f.write_text(f.read_text()[:40])
    res = env.apply()
    assert res.status == "applied" and "damaged" in res.note
    assert env.apply().status == "noop"


def test_a_torn_state_file_never_costs_a_commit(env):
    t = one_patch(env)
    author_commit(t, {"src/b.txt": "mine\n"}, "my commit")
    f = t / ".git/dsv4/state.json"
    f.write_text("{")
    with pytest.raises(Dsv4Error, match="damaged"):
        env.apply()
    assert git(t, "log", "-1", "--format=%s").strip() == "my commit"


def test_state_and_journal_are_written_atomically(env, monkeypatch):
    """A write cut short leaves the previous bytes, never a torn file."""
    from dsv4_patch import atomicio

    t = one_patch(env)
    f = t / ".git/dsv4/state.json"
    before = f.read_bytes()

    def torn(fd, data):
        import os
        os.write(fd, data[:7])
        raise KeyboardInterrupt

    monkeypatch.setattr(atomicio, "_write_all", torn)
    with pytest.raises(KeyboardInterrupt):
        tree_mod.write_state(t, {"x": 1})
    assert f.read_bytes() == before


def test_the_lock_works_where_folders_cannot_be_locked(env, monkeypatch):
    """NFS refuses an exclusive flock on a folder opened read-only: a lock file in the cache
    stands in, and it still excludes another process."""
    import os
    import subprocess
    import sys
    import textwrap

    from dsv4_patch import locks

    refuse_folder_flocks(monkeypatch)
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))
    code = textwrap.dedent(f"""
        import fcntl, os, sys
        sys.path[:0] = [{str(__import__("pathlib").Path(__file__).resolve().parents[2])!r}]
        from dsv4_patch import locks
        from dsv4_patch.config import load_project
        real = fcntl.flock
        def no_dir_locks(fd, op):
            if os.path.isdir(os.readlink(f"/proc/self/fd/{{fd}}")):
                raise OSError(9, "Bad file descriptor")
            return real(fd, op)
        fcntl.flock = no_dir_locks
        with locks.stack_lock(load_project({str(env.root)!r}).stack("demo")):
            print("got it", flush=True)
    """)
    with locks.stack_lock(env.stack):
        assert list((env.cache.root / "locks").glob("*.lock"))  # the stand-in lock file is in the cache
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)})
        time.sleep(1.0)
        assert p.poll() is None  # still waiting for the lock
    assert p.communicate(timeout=30)[0].strip() == "got it"
