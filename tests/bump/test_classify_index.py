"""The private index bump and walk classify on: a reload gives the tree asked for (restored or read
again), a ref is read again each time, and a conflict's hunks are judged as on the whole tree."""

from __future__ import annotations

from pathlib import Path

from synth import Upstream, numbered

from dsv4_patch.bump.classify import Index, failing_hunks, hunk_patch
from dsv4_patch.gitcmd import Git
from dsv4_patch.patchfile import parse_patch_bytes


def _repo(tmp_path: Path, n: int) -> tuple[Git, list[str]]:
    up = Upstream(tmp_path / "up")
    trees = []
    for i in range(n):
        up.write("a.txt", numbered(40).replace(f"line {i + 1}\n", f"line {i + 1} changed\n"))
        up.write(f"f{i}.txt", f"{i}\n")
        up.commit(f"c{i}")
        trees.append(Git(up.path).out("rev-parse", "HEAD^{tree}"))
    return Git(up.path), trees


def test_a_reload_gives_the_tree_asked_for_after_the_index_changed(tmp_path):
    g, trees = _repo(tmp_path, Index.KEEP + 3)
    idx = Index(g, tmp_path / "x.index")
    for t in trees:  # more trees than are kept: the oldest are read again, not restored wrongly
        idx.load(t)
        assert idx.tree() == t
    blob = g.run("hash-object", "-w", "--stdin", stdin=b"x\n").out.strip()
    for t in reversed(trees):
        idx.load(t)
        g.run("update-index", "--add", "--cacheinfo", f"100644,{blob},new.txt", env=idx.env)
        assert idx.tree() != t  # the index moved on
        idx.load(t)
        assert idx.tree() == t


def test_a_ref_is_read_again_each_time(tmp_path):
    g, trees = _repo(tmp_path, 2)
    idx = Index(g, tmp_path / "x.index")
    g.run("update-ref", "refs/heads/moving", "HEAD~1")
    idx.load("refs/heads/moving")
    assert idx.tree() == trees[0]
    g.run("update-ref", "refs/heads/moving", "HEAD")
    idx.load("refs/heads/moving")
    assert idx.tree() == trees[1]


def test_failing_hunks_are_those_that_fail_on_the_whole_tree(tmp_path):
    """Two hunks in one file: one whose context upstream changed (it fails, and its 3-way merge
    conflicts: upstream changed the line next to it), one that still applies."""
    up = Upstream(tmp_path / "up")
    up.write("a.txt", numbered(60))
    up.write("b.txt", numbered(10, "b"))
    up.commit("base")
    up.write("a.txt", numbered(60).replace("line 5\n", "line five\n").replace("line 50\n", "line fifty\n"))
    g = Git(up.path)
    g.run("add", "-A")
    g.run("-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "patch")
    raw = g.raw("format-patch", "--stdout", "-1", "HEAD")
    g.run("reset", "-q", "--hard", "HEAD~1")
    up.write("a.txt", numbered(60).replace("line 4\n", "line 4 upstream\n"))
    up.commit("upstream touches line 4")
    pre = g.out("rev-parse", "HEAD^{tree}")
    patch = parse_patch_bytes(raw, "p.patch")
    idx, spare = Index(g, tmp_path / "i.index"), Index(g, tmp_path / "s.index")
    idx.load(pre)
    issues = failing_hunks(idx, spare, pre, patch, ["a.txt"])
    assert [i.line for i in issues] == [patch.files[0].hunks[0].line]  # the first hunk only
    # the same verdict from git on the whole tree, hunk by hunk
    whole = Index(g, tmp_path / "w.index")
    whole.load(pre)
    fd = patch.files[0]
    assert [whole.apply(hunk_patch(patch, fd, h), "--check").rc != 0 for h in fd.hunks] == [True, False]
