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
    issues = failing_hunks(spare, pre, patch, ["a.txt"])
    assert [i.line for i in issues] == [patch.files[0].hunks[0].line]  # the first hunk only
    # the same verdict from git on the whole tree, hunk by hunk
    whole = Index(g, tmp_path / "w.index")
    whole.load(pre)
    fd = patch.files[0]
    assert [whole.apply(hunk_patch(patch, fd, h), "--check").rc != 0 for h in fd.hunks] == [True, False]


def _reference_failing_hunks(g: Git, tmp: Path, pre: str, patch, files: list[str]) -> list[tuple[str, int]]:
    """The rule as plain git gives it on the whole tree: a hunk fails when it does not apply on the
    full index; among those, the ones whose 3-way merge on the full index fails too are the real
    conflicts (all of the failing ones when each merges on its own)."""
    full, scratch = Index(g, tmp / "ref-full.index"), Index(g, tmp / "ref-scratch.index")
    plain, hard = [], []
    for fd in patch.files:
        if not set(fd.paths) & set(files):
            continue
        for h in fd.hunks:
            one = hunk_patch(patch, fd, h)
            g.run("read-tree", pre, env=full.env)
            if full.apply(one, "--check").rc == 0:
                continue
            plain.append((fd.path, h.line))
            g.run("read-tree", pre, env=scratch.env)
            if scratch.apply(one, "--3way").rc != 0:
                hard.append((fd.path, h.line))
    return hard or plain


def test_failing_hunks_agree_with_git_on_the_whole_tree_for_renames_deletions_and_odd_names(tmp_path):
    up = Upstream(tmp_path / "up")
    g = Git(up.path)
    base = {"a.txt": numbered(60), ":memo.txt": numbered(20, "m"), "old.txt": numbered(30, "o"),
            "gone.txt": numbered(12, "g"), "other/keep.txt": "keep\n"}
    for rel, text in base.items():
        up.write(rel, text)
    up.commit("base")
    # the patch: two hunks in a.txt and in :memo.txt, a rename with an edit, a deletion, a new file
    up.write("a.txt", numbered(60).replace("line 5\n", "line five\n").replace("line 50\n", "line fifty\n"))
    up.write(":memo.txt", numbered(20, "m").replace("m 3\n", "m three\n").replace("m 15\n", "m fifteen\n"))
    (up.path / "old.txt").unlink()
    up.write("new.txt", numbered(30, "o").replace("o 10\n", "o ten\n"))
    (up.path / "gone.txt").unlink()
    up.write("fresh.txt", "fresh\n")
    g.run("add", "-A")
    g.run("-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "patch")
    raw = g.raw("format-patch", "-M", "--stdout", "-1", "HEAD")
    g.run("reset", "-q", "--hard", "HEAD~1")
    # upstream moves under it: next to one hunk of each file, the renamed file, the deleted file,
    # and a fresh.txt of its own
    up.write("a.txt", numbered(60).replace("line 4\n", "line 4 upstream\n"))
    up.write(":memo.txt", numbered(20, "m").replace("m 14\n", "m 14 upstream\n"))
    up.write("old.txt", numbered(30, "o").replace("o 11\n", "o 11 upstream\n"))
    up.write("gone.txt", numbered(12, "g").replace("g 6\n", "g 6 upstream\n"))
    up.write("fresh.txt", "upstream's own\n")
    up.commit("upstream")
    pre = g.out("rev-parse", "HEAD^{tree}")
    patch = parse_patch_bytes(raw, "p.patch")
    assert {fd.path for fd in patch.files} >= {"a.txt", ":memo.txt", "new.txt", "gone.txt", "fresh.txt"}
    files = sorted({p for fd in patch.files for p in fd.paths})
    want = _reference_failing_hunks(g, tmp_path, pre, patch, files)
    assert {path for path, _ in want} >= {"a.txt", ":memo.txt"}, want  # the scenario has real failures
    idx, spare = Index(g, tmp_path / "i.index"), Index(g, tmp_path / "s.index")
    idx.load(pre)
    got = [(i.file, i.line) for i in failing_hunks(spare, pre, patch, files)]
    assert got == want
    for one_file in files:  # and file by file, as classify asks for the files that failed
        assert [(i.file, i.line) for i in failing_hunks(spare, pre, patch, [one_file])] == \
            _reference_failing_hunks(g, tmp_path, pre, patch, [one_file]), one_file


def test_a_patch_touching_nothing_the_tree_has_gives_an_empty_small_index(tmp_path):
    g, trees = _repo(tmp_path, 1)
    spare = Index(g, tmp_path / "s.index")
    spare.only(trees[0], ["no/such/file.txt"])
    assert spare.tree() == g.out("hash-object", "-t", "tree", "/dev/null")  # the empty tree
