"""apply: one commit per patch, deterministic, atomic, 3-way, conflicts and already-upstream."""

from __future__ import annotations

import pytest
from synth import git, numbered

from dsv4_patch.errors import EXIT_CONFLICT, ConflictError, Dsv4Error, PatchFormatError
from dsv4_patch.gitcmd import Git
from dsv4_patch.tree import BASE_REF


def edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


def test_clean_apply_one_commit_per_patch_on_branch_with_base_ref(env):
    a = numbered(60)
    env.author({"src/a.py": edit(a, "line 10\n", "line 10 fixed\n")}, "[DSV4] First fix")
    env.author({"src/b.txt": edit(numbered(30, "b"), "b 3\n", "b 3 fixed\n")}, "[DSV4] Second fix")
    res = env.rebuild()
    g = Git(res.tree)
    assert g.out("rev-parse", "--abbrev-ref", "HEAD") == "dsv4/demo"
    assert g.rev(BASE_REF) == env.base
    log = g.out("log", "--format=%s|%an|%ad|%cn|%cd", "--date=iso-strict", f"{env.base}..HEAD").splitlines()
    assert [entry.split("|")[0] for entry in log] == ["[DSV4] Second fix", "[DSV4] First fix"]
    # author and date kept; committer fixed
    assert all(e.split("|")[1] == "Pat Cher" and e.split("|")[3] == "dsv4-patch" for e in log)
    assert all(e.split("|")[2].startswith("2026-02-01") and e.split("|")[4].startswith("2000-01-01") for e in log)
    assert "line 10 fixed" in (res.tree / "src/a.py").read_text()
    assert [p for p, _ in res.commits] == ["first-fix.patch", "second-fix.patch"]


def test_same_inputs_give_same_commit_hashes_in_another_folder(env, tmp_path):
    env.author({"src/a.py": edit(numbered(60), "line 5\n", "line five\n")}, "[DSV4] Fix five")
    one = env.rebuild()
    from dsv4_patch.tree import build_tree

    two = build_tree(env.stack, tmp_path / "elsewhere", cache=env.cache)
    assert one.commits == two.commits
    assert Git(one.tree).rev("HEAD") == Git(two.tree).rev("HEAD")


def test_reapply_with_nothing_changed_is_a_noop_that_says_so(env):
    env.author({"src/a.py": edit(numbered(60), "line 5\n", "line five\n")}, "[DSV4] Fix five")
    env.rebuild()
    again = env.apply()
    assert again.status == "noop" and "nothing changed" in again.note
    # a changed patch byte is not a no-op
    p = next((env.root / "patches/demo").glob("*.patch"))
    p.write_bytes(p.read_bytes().replace(b"Why and how.", b"Why and how!"))
    assert env.apply().status == "applied"


def test_local_commits_are_protected_unless_forced(env):
    tree = env.apply().tree
    (tree / "src/a.py").write_text("edited\n")
    with pytest.raises(Dsv4Error, match="uncommitted changes"):
        env.apply()
    assert (tree / "src/a.py").read_text() == "edited\n"  # nothing lost
    env.apply(force=True)
    assert (tree / "src/a.py").read_text() == numbered(60)


def test_threeway_applies_after_a_nearby_upstream_change(env):
    env.author({"src/a.py": edit(numbered(60), "line 20\n", "line 20 patched\n")}, "[DSV4] Patch twenty")
    # upstream moves on: a change two lines away from the hunk breaks the context
    env.up.write("src/a.py", edit(numbered(60), "line 18\n", "line 18 upstream\n"))
    env.repin(env.up.commit("nearby change"))
    with pytest.raises(ConflictError):
        env.apply(threeway=False)
    res = env.apply(threeway=True)
    text = (res.tree / "src/a.py").read_text()
    assert "line 18 upstream\n" in text and "line 20 patched\n" in text


def test_real_conflict_exits_3_and_names_patch_file_hunk_and_expected_lines(env):
    env.author({"src/a.py": edit(numbered(60), "line 30\n", "line 30 ours\n")}, "[DSV4] Ours")
    good = env.apply().tree
    env.up.write("src/a.py", edit(numbered(60), "line 30\n", "line 30 theirs\n"))
    env.repin(env.up.commit("conflicting change"))
    with pytest.raises(ConflictError) as ei:
        env.apply()
    e = ei.value
    assert e.exit_code == EXIT_CONFLICT
    rep = e.report
    assert rep.patch == "ours.patch" and rep.kind == "conflict"
    assert rep.files == ["src/a.py"]
    assert rep.hunks and rep.hunks[0].file == "src/a.py" and "line 30" in rep.hunks[0].expected
    assert rep.hunks[0].header.startswith("@@ -27,7")
    # the previous tree is untouched and the failed state is kept for inspection
    assert "line 30 ours" in (good / "src/a.py").read_text()
    assert (env.out / ".dsv4/failed/demo/.git/rebase-apply").is_dir()


def test_patch_already_in_upstream_is_reported_not_an_empty_commit(env):
    new = edit(numbered(60), "line 40\n", "line 40 fixed\n")
    env.author({"src/a.py": new}, "[DSV4] Fix forty")
    old_base = env.base
    env.up.write("src/a.py", new)
    env.repin(env.up.commit("upstream took our fix"))
    with pytest.raises(ConflictError) as ei:
        env.apply()
    assert ei.value.report.kind == "upstreamed" and ei.value.report.patch == "fix-forty.patch"
    assert ei.value.exit_code == EXIT_CONFLICT
    failed = Git(env.out / ".dsv4/failed/demo")
    assert failed.rev("HEAD") == env.base  # no empty commit was made
    assert Git(env.out / "demo").rev(BASE_REF) == old_base  # the previous tree is untouched


def test_target_file_vanished_is_reported(env):
    env.author({"src/b.txt": edit(numbered(30, "b"), "b 2\n", "b two\n")}, "[DSV4] Touch b")
    (env.up.path / "src/b.txt").unlink()
    env.repin(env.up.commit("b removed"))
    with pytest.raises(ConflictError) as ei:
        env.apply()
    assert ei.value.report.kind == "missing-file" and "src/b.txt" in ei.value.report.files


def test_empty_series_builds_the_pristine_pin(env):
    res = env.apply()
    assert res.commits == [] and Git(res.tree).rev("HEAD") == env.base
    assert env.export(check=True).stale is False


def test_missing_patch_file_names_the_series_line(env):
    (env.root / "patches/demo/series").write_text("# x\nnot-there.patch\n")
    with pytest.raises(PatchFormatError, match="not-there.patch"):
        env.apply()


def test_malformed_mbox_is_refused_with_its_name(env):
    (env.root / "patches/demo/bad.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (env.root / "patches/demo/series").write_text("bad.patch\n")
    with pytest.raises(PatchFormatError, match=r"bad.patch:1: not a git format-patch mbox"):
        env.apply()


def test_truncated_hunk_is_refused(env):
    env.author({"src/a.py": edit(numbered(60), "line 9\n", "line nine\n")}, "[DSV4] Nine")
    p = next((env.root / "patches/demo").glob("*.patch"))
    p.write_bytes(p.read_bytes().rsplit(b"\n", 4)[0] + b"\n")
    with pytest.raises(PatchFormatError, match="truncated|ends early"):
        env.apply(force=True)


def test_path_traversal_patch_is_refused_before_git_sees_it(env):
    env.author({"src/a.py": edit(numbered(60), "line 9\n", "line nine\n")}, "[DSV4] Nine")
    p = next((env.root / "patches/demo").glob("*.patch"))
    p.write_bytes(p.read_bytes().replace(b"src/a.py", b"../../etc/a.py"))
    with pytest.raises(PatchFormatError, match=r"path with '\.\.'"):
        env.apply(force=True)
    assert not (env.tmp / "etc").exists()


def test_git_hooks_of_the_upstream_never_run(env, tmp_path):
    marker = tmp_path / "hook-ran"
    hook = env.up.path / ".git/hooks/post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(env.up.path, "config", "core.hooksPath", ".git/hooks")
    env.author({"src/a.py": edit(numbered(60), "line 9\n", "line nine\n")}, "[DSV4] Nine")
    env.rebuild()
    assert not marker.exists()


def test_apply_after_export_is_a_noop(env):
    env.author({"src/a.py": edit(numbered(60), "line 5\n", "line five\n")}, "[DSV4] Fix five")
    # the tree now holds a commit made by hand; export adopted it, so nothing needs rebuilding
    res = env.apply()
    assert res.status == "noop"
    assert "line five" in (res.tree / "src/a.py").read_text()
