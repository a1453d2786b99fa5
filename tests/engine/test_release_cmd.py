"""`dsv4-patch release add|move|retire`, bump's port advice, conflict trees that survive a round,
and the carried commits' messages (synthetic upstreams: tests/engine/synth.py, tests/bump/bumpkit.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bump"))

from bumpkit import BumpEnv, edit  # noqa: E402
from synth import numbered  # noqa: E402

from dsv4_patch.bump import BumpOptions, bump, record_resolutions  # noqa: E402
from dsv4_patch.bump.report import bump_markdown  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402


@pytest.fixture
def benv(tmp_path) -> BumpEnv:
    return BumpEnv(tmp_path)


def run(benv, ref, stack="demo", **kw):
    opts = BumpOptions(out=benv.out, **{"regress": False, "semantic": False, **kw})
    return bump(load_project(benv.root), stack, ref, opts=opts, cache=benv.cache)


# --- conflict trees survive a round ------------------------------------------------------------

def test_a_conflict_tree_with_work_survives_the_next_round_and_is_named_by_its_patch(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    rep = run(benv, new)
    tree = benv.out / "demo.bump-conflicts/p4-conflict"
    assert rep.conflict_trees == {"p4-conflict.patch": str(tree)}
    assert rep.trees["kept"] == {}
    partial = (tree / "src/a.py").read_text().replace("line 10 p1\n", "line 10 p1 (half resolved)\n")
    (tree / "src/a.py").write_text(partial)
    # the same conflict again: the tree and its work stay as they are
    rep = run(benv, new)
    assert rep.conflict_trees == {"p4-conflict.patch": str(tree)}
    assert (tree / "src/a.py").read_text() == partial
    assert rep.trees["kept"]["p4-conflict.patch"] == ["edited src/a.py"]
    assert "Kept from the last round with your work in it: edited src/a.py" in bump_markdown(rep)
    # another upstream: another pre-image; the tree with work is left in place and named
    benv.up.write("src/a.py", edit(numbered(60), "line 50\n", "line 50 elsewhere\n"))
    other = benv.up.commit("upstream again")
    rep = run(benv, other)
    assert (tree / "src/a.py").read_text() == partial
    assert [(x["tree"], x["why"]) for x in rep.trees["left"]] == [(str(tree), "made against another pre-image")]
    md = bump_markdown(rep)
    assert "Conflict trees left in place" in md and "--force" in md
    # --force discards it and makes the tree of this round
    rep = run(benv, other, force=True)
    assert rep.trees["left"] == [] and rep.conflict_trees == {"p4-conflict.patch": str(tree)}
    assert "line 50 elsewhere" in (tree / "src/a.py").read_text()
    assert "half resolved" not in (tree / "src/a.py").read_text()


def test_a_commit_or_a_staged_resolution_is_work_and_a_recorded_one_is_not(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    run(benv, new)
    tree = benv.out / "demo.bump-conflicts/p4-conflict"
    resolved = edit(edit(numbered(60), "line 10\n", "line 10 p1\n"), "line 37\n", "line 37 upstream\n")
    (tree / "src/a.py").write_text(edit(resolved, "line 50\n", "line 50 upstream p4\n"))
    from dsv4_patch.gitcmd import Git

    Git(tree).run("add", "src/a.py")
    benv.up.write("src/zz.txt", "unrelated\n")
    later = benv.up.commit("unrelated upstream change")  # p4 meets the same pre-image blobs, another commit
    rep = run(benv, later)
    assert rep.trees["left"] and rep.trees["left"][0]["work"] == ["edited src/a.py"]
    [r] = record_resolutions(load_project(benv.root), "demo", out=benv.out)
    assert r["recorded"], r
    rep = run(benv, new)  # resolved by the recorded resolution: the tree (now recorded) goes
    assert [o.status for o in rep.outcomes] == ["clean", "resolved"]
    assert not tree.exists() and rep.trees["left"] == []


def test_a_folder_bump_did_not_make_is_never_deleted(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    mine = benv.out / "demo.bump-conflicts/notes"
    mine.mkdir(parents=True)
    (mine / "todo.txt").write_text("mine\n")
    run(benv, new)
    run(benv, new)
    assert (mine / "todo.txt").read_text() == "mine\n"


def test_the_report_names_the_blocked_patches_a_tree_lacks(benv):
    a = edit(numbered(60), "line 10\n", "line 10 pA\n")
    benv.author({"src/a.py": a}, "[DSV4] pA")
    benv.author({"src/a.py": edit(a, "line 50\n", "line 50 pB\n")}, "[DSV4] pB")
    benv.up.write("src/a.py", edit(edit(numbered(60), "line 10\n", "line 10 up\n"), "line 50\n", "line 50 up\n"))
    rep = run(benv, benv.up.commit("upstream changes both lines"))
    assert rep.trees["skipped_before"] == {"pa.patch": [], "pb.patch": ["pa.patch"]}
    assert "This tree lacks the earlier blocked patch(es) `pa.patch`" in bump_markdown(rep)
    data = json.loads(json.dumps(rep.to_dict(), default=str))
    assert data["trees"]["skipped_before"]["pb.patch"] == ["pa.patch"]
