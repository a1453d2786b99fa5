"""Incremental apply: a tree re-applied from its first changed patch is the tree a full rebuild
makes (same commit ids, same trees), local work still stops it, a killed switch is completed."""

from __future__ import annotations

import itertools

import pytest
from synth import META, author_commit, numbered

from dsv4_patch import incremental
from dsv4_patch.errors import ConflictError, Dsv4Error
from dsv4_patch.exporter import export_stack
from dsv4_patch.gitcmd import Git
from dsv4_patch.tree import build_tree, read_state

_scratch = itertools.count()


def specs(ids: list[int], variant: dict[int, str] | None = None) -> list[tuple[str, dict]]:
    """Patch i rewrites line 3+5*(i%11) of src/a.py (5 lines apart: contexts never overlap, so any
    order applies); every third one also adds a file. variant[i] changes patch i's diff and subject."""
    variant = variant or {}
    a = numbered(60)
    out = []
    for i in ids:
        tag = variant.get(i, "")
        n = 3 + 5 * (i % 11)
        a = a.replace(f"line {n}\n", f"line {n} p{i}{tag}\n", 1)
        files = {"src/a.py": a}
        if i % 3 == 0:
            files[f"src/new_{i}.py"] = f"N = {i!r}  # {tag}\n"
        out.append((f"[DSV4] Patch {i}{tag}", files))
    return out


def write_series(env, series: list[tuple[str, dict]]) -> None:
    """Make the series the maintainer's way: commits in a tree of the pin, then export."""
    tree = build_tree(env.stack, env.tmp / f"scratch-{next(_scratch)}", cache=env.cache, upto=0).tree
    for subject, files in series:
        author_commit(tree, files, subject, "Why and how.\n\n" + META)
    export_stack(env.stack, tree, remove=True)  # the whole series is replaced on purpose


def full_rebuild(env):
    return build_tree(env.stack, env.tmp / f"full-{next(_scratch)}", cache=env.cache)


def snapshot(res) -> tuple:
    g = Git(res.tree)
    assert g.out("status", "--porcelain", "--untracked-files=all") == ""  # work tree == HEAD
    return res.commits, g.out("rev-parse", "HEAD^{tree}"), g.out("rev-parse", "HEAD"), g.out("ls-files", "-s")


CASES = {
    # name: (series before, series after, commits expected to be kept)
    "edit-first": ([0, 1, 2, 3, 4, 5], ([0, 1, 2, 3, 4, 5], {0: "x"}), 0),
    "edit-middle": ([0, 1, 2, 3, 4, 5], ([0, 1, 2, 3, 4, 5], {3: "x"}), 3),
    "edit-last": ([0, 1, 2, 3, 4, 5], ([0, 1, 2, 3, 4, 5], {5: "x"}), 5),
    "delete-middle": ([0, 1, 2, 3, 4, 5], ([0, 1, 2, 4, 5], {}), 3),
    "delete-last": ([0, 1, 2, 3, 4, 5], ([0, 1, 2, 3, 4], {}), 5),
    "insert-middle": ([0, 1, 2, 3, 4, 5], ([0, 1, 9, 2, 3, 4, 5], {}), 2),
    "append": ([0, 1, 2, 3], ([0, 1, 2, 3, 4, 5], {}), 4),
    "reorder": ([0, 1, 2, 3, 4, 5], ([0, 1, 2, 4, 3, 5], {}), 3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_incremental_equals_full_rebuild(env, case):
    before, (after, variant), kept = CASES[case]
    write_series(env, specs(before))
    first = env.rebuild()
    assert first.status == "applied" and len(first.commits) == len(before)
    write_series(env, specs(after, variant))
    inc = env.apply()
    assert inc.note == f"incremental: kept {kept} commits, re-applied {len(after) - kept} patches"
    assert inc.commits[:kept] == first.commits[:kept]  # really kept, not remade
    assert snapshot(inc) == snapshot(full_rebuild(env))
    assert env.apply().status == "noop"


def test_incremental_commits_are_the_ones_git_am_makes(env, monkeypatch):
    write_series(env, specs([0, 1, 2, 3]))
    env.rebuild()
    write_series(env, specs([0, 1, 2, 3], {2: "y"}))
    inc = env.apply()
    assert inc.note.startswith("incremental: kept 2")
    monkeypatch.setattr(incremental, "fast_commits", lambda g, start, mails, **kw: ([], "test: git am only"))
    assert snapshot(inc) == snapshot(full_rebuild(env))


def test_changed_base_rebuilds_and_equals_full(env):
    write_series(env, specs([0, 1, 2, 3]))
    env.rebuild()
    env.up.write("src/b.txt", numbered(30, "b").replace("b 20\n", "b 20 upstream\n"))
    env.repin(env.up.commit("upstream moves"))
    res = env.apply()
    assert res.status == "applied" and not res.note.startswith("incremental")
    assert Git(res.tree).out("rev-parse", "refs/dsv4/base") == env.base
    assert snapshot(res) == snapshot(full_rebuild(env))


def test_local_change_stops_the_incremental_apply_and_is_kept(env):
    write_series(env, specs([0, 1, 2]))
    tree = env.rebuild().tree
    tip = Git(tree).rev("HEAD")
    write_series(env, specs([0, 1, 2], {2: "z"}))
    (tree / "src/a.py").write_text("my edit\n")
    with pytest.raises(Dsv4Error, match="uncommitted changes"):
        env.apply()
    assert (tree / "src/a.py").read_text() == "my edit\n" and Git(tree).rev("HEAD") == tip


def test_a_conflict_in_a_changed_patch_leaves_the_tree_and_reports_it(env):
    write_series(env, specs([0, 1, 2, 3]))
    tree = env.rebuild().tree
    tip = Git(tree).rev("HEAD")
    target = env.root / "patches/demo/patch-2.patch"
    # a hand edit of a context line: the patch no longer matches the pin anywhere
    target.write_bytes(target.read_bytes().replace(b"\n line 12\n", b"\n line twelve\n", 1))
    with pytest.raises(ConflictError) as ei:
        env.apply()
    assert ei.value.report.patch == target.name and ei.value.report.files == ["src/a.py"]
    assert Git(tree).rev("HEAD") == tip and Git(tree).out("status", "--porcelain") == ""


def test_a_killed_switch_is_completed_by_the_next_run(env, monkeypatch):
    write_series(env, specs([0, 1, 2, 3]))
    tree = env.rebuild().tree
    write_series(env, specs([0, 1, 2, 3], {1: "k"}))

    def killed(*a, **k):
        raise KeyboardInterrupt  # dies after the work tree moved, before the branch and state

    with monkeypatch.context() as m:
        m.setattr(incremental, "_finish", killed)
        with pytest.raises(KeyboardInterrupt):
            env.apply()
    assert (tree / ".git/dsv4/switch.json").exists()
    res = env.apply()
    assert not (tree / ".git/dsv4/switch.json").exists()
    assert res.status == "noop"  # the journal completed the switch to the new commits
    assert snapshot(res) == snapshot(full_rebuild(env))
    assert read_state(tree)["tip"] == Git(tree).rev("HEAD")


def test_a_killed_switch_never_overwrites_later_user_work(env, monkeypatch):
    write_series(env, specs([0, 1, 2]))
    tree = env.rebuild().tree
    write_series(env, specs([0, 1, 2], {2: "k"}))
    with monkeypatch.context() as m:
        m.setattr(incremental, "_finish", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            env.apply()
    (tree / "src/b.txt").write_text("edited after the crash\n")  # a path the switch never touches
    with pytest.raises(Dsv4Error, match="interrupted apply.*src/b.txt"):
        env.apply()
    assert (tree / "src/b.txt").read_text() == "edited after the crash\n"


def test_state_records_what_was_made_and_adopted_commits_are_not_reused(env):
    write_series(env, specs([0, 1, 2]))
    res = env.rebuild()
    st = read_state(res.tree)
    assert [m[2] for m in st["made"]] == [c for _, c in res.commits]
    # the maintainer rewrites patch 1 by hand in the tree and exports: the tree is adopted
    base_of_1 = res.commits[0][1]
    rest = [c for _, c in res.commits[1:]]
    from synth import git

    git(res.tree, "reset", "-q", "--hard", base_of_1)
    for c in rest:
        git(res.tree, "cherry-pick", c, env={"GIT_COMMITTER_NAME": "Someone Else"})
    env.export()
    again = env.apply()
    assert again.status == "noop"  # export adopted the hand-made commits
    write_series(env, specs([0, 1, 2], {2: "w"}))
    inc = env.apply()
    # commit 0 is still ours; commit 1 is the cherry-picked one, which a rebuild would not make
    assert inc.note.startswith("incremental: kept 1 ")
    assert snapshot(inc) == snapshot(full_rebuild(env))


def test_a_changed_patch_the_fast_path_declines_is_rebuilt_not_switched(env):
    write_series(env, specs([0, 1, 2, 3]))
    tree = env.rebuild().tree
    old_inode = (tree / ".git").stat().st_ino
    p = env.root / "patches/demo/patch-2.patch"
    p.write_bytes(p.read_bytes().replace(b"Why and how.", b"Why and how.\r", 1))  # git am copes; we decline
    said: list[str] = []
    res = build_tree(env.stack, env.out, cache=env.cache, progress=said.append)
    assert any("rebuilding (patch-2.patch: " in m for m in said)
    assert not res.note.startswith("incremental") and (tree / ".git").stat().st_ino != old_inode  # swapped
    assert snapshot(res) == snapshot(full_rebuild(env))
