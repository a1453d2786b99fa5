"""bump on a synthetic upstream: every verdict, carry-on vs stop, refresh + pin, drop, regress."""

from __future__ import annotations

import json

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.config import load_project
from dsv4_patch.gitcmd import Git
from dsv4_patch.patchfile import load_patch
from dsv4_patch.tree import build_tree

ORDER = ["p1-clean.patch", "p2-offset.patch", "p3-threeway.patch", "p4-conflict.patch",
         "p5-upstreamed.patch", "p6-obsolete.patch"]


def run(benv, ref, **kw):
    opts = BumpOptions(out=benv.out, **{"regress": False, **kw})
    return bump(load_project(benv.root), "demo", ref, opts=opts, cache=benv.cache)


def test_every_verdict_and_carry_on_past_the_conflict(benv):
    benv.author_all()
    before = benv.patch_bytes()
    toml = (benv.root / "patches/stacks.toml").read_text()
    new = benv.upstream_next()
    rep = run(benv, new)
    assert [o.patch for o in rep.outcomes] == ORDER
    assert [o.status for o in rep.outcomes] == ["clean", "offset", "3way", "conflict", "upstreamed", "obsolete"]
    p2, p3, p4, p5, p6 = rep.outcomes[1:]
    assert p2.offsets == ["src/b.txt: hunk #1 at line 22 (offset 5)"]
    assert p3.files == ["src/a.py"]
    assert p4.files == ["src/a.py"] and [h.header.split(" @@")[0] for h in p4.hunks] == ["@@ -47,7 +47,7"]
    assert "reverse-apply" in p5.evidence
    assert p6.files == ["src/c.txt"]
    assert rep.status == "conflicts" and rep.exit_code == 3
    # nothing in the project changed; the conflicting patch's tree waits for a person
    assert benv.patch_bytes() == before
    assert (benv.root / "patches/stacks.toml").read_text() == toml
    assert set(rep.conflict_trees) == {"p4-conflict.patch", "p6-obsolete.patch"}
    assert "<<<<<<<" in (benv.out / "demo.bump-conflicts/p4-conflict/src/a.py").read_text()
    # the rebased tree holds the patches that found a place, one commit each, on the new base
    g = Git(benv.out / "demo.bump")
    assert g.rev("refs/dsv4/base") == new
    assert g.out("log", "--format=%s", f"{new}..HEAD").splitlines() == [
        "[DSV4] p3 threeway", "[DSV4] p2 offset", "[DSV4] p1 clean"]
    assert "p4 conflict" in rep.range_diff  # the old commit with no counterpart is listed


def test_stop_on_conflict_leaves_the_rest_untried(benv):
    benv.author_all()
    rep = run(benv, benv.upstream_next(), stop_on_conflict=True)
    assert [o.status for o in rep.outcomes][3:] == ["conflict", "not-tried", "not-tried"]
    assert list(rep.conflict_trees) == ["p4-conflict.patch"]


def test_success_refreshes_context_keeps_the_change_and_moves_the_pin(benv):
    benv.author_all(("p1", "p2", "p3"))
    old = {n: load_patch(benv.root / "patches/demo" / n) for n in ORDER[:3]}
    new = benv.upstream_next(conflict=False, upstreamed=False, obsolete=False)
    rep = run(benv, new)
    # every patch found a place and was written; no test ran (regress off, no test files): unverified, exit 4
    assert rep.status == "ok" and rep.result == "unverified" and rep.exit_code == 4
    assert set(rep.unverified) == set(ORDER[:3]) and "regression tests not run (--no-regress)" in rep.unverified[ORDER[0]]
    assert [o.status for o in rep.outcomes] == ["clean", "offset", "3way"]
    assert f'commit = "{new}"' in (benv.root / "patches/stacks.toml").read_text()
    for n in ORDER[:3]:
        fresh = load_patch(benv.root / "patches/demo" / n)
        # same change (added/removed lines) ...
        assert [(h.added, [x for x in h.lines if x[:1] == "-"]) for f in fresh.files for h in f.hunks] == \
               [(h.added, [x for x in h.lines if x[:1] == "-"]) for f in old[n].files for h in f.hunks]
    # ... new context: p2's hunk moved by the five inserted lines, p3's context has upstream's line 37
    assert load_patch(benv.root / "patches/demo/p2-offset.patch").files[0].hunks[0].old_start == 22
    assert "line 37 upstream" in load_patch(benv.root / "patches/demo/p3-threeway.patch").diff_text
    # the refreshed stack applies at the new pin without 3-way help
    res = build_tree(load_project(benv.root).stack("demo"), benv.tmp / "again", cache=benv.cache, threeway=False)
    assert Git(res.tree).rev("refs/dsv4/base") == new


def test_upstreamed_is_proposed_not_dropped_unless_asked(benv):
    benv.author_all(("p1", "p5"))
    new = benv.upstream_next(conflict=False, obsolete=False)
    rep = run(benv, new)
    assert [o.status for o in rep.outcomes] == ["clean", "upstreamed"]
    assert rep.status == "upstreamed" and rep.exit_code == 3
    assert "p5-upstreamed.patch" in (benv.root / "patches/demo/series").read_text()
    rep = run(benv, new, drop_upstreamed=True)
    assert rep.status == "ok"
    assert "p5-upstreamed.patch" not in (benv.root / "patches/demo/series").read_text()
    assert not (benv.root / "patches/demo/p5-upstreamed.patch").exists()


def test_empty_three_way_result_counts_as_upstreamed(benv):
    # upstream made p5's change AND edited its context: reverse-apply fails, the merge is empty
    benv.author_all(("p5",))
    d = numbered_d = "".join(f"d {i}\n" for i in range(1, 21))
    d = d.replace("d 5\n", "d 5 p5\n").replace("d 2\n", "d 2 upstream\n")
    benv.up.write("src/d.txt", d)
    assert numbered_d != d
    rep = run(benv, benv.up.commit("upstream takes p5"))
    assert rep.outcomes[0].status == "upstreamed" and "empty result" in rep.outcomes[0].evidence


def test_into_writes_a_copy_and_leaves_the_pin(benv, tmp_path):
    benv.author_all(("p1", "p2"))
    toml = (benv.root / "patches/stacks.toml").read_text()
    new = benv.upstream_next(conflict=False, upstreamed=False, obsolete=False)
    rep = run(benv, new, into=tmp_path / "copy")
    assert rep.status == "ok" and rep.pin == {}
    assert (benv.root / "patches/stacks.toml").read_text() == toml
    assert (tmp_path / "copy/series").read_text().splitlines()[-2:] == ORDER[:2]
    assert (tmp_path / "copy/p2-offset.patch").read_bytes() != (benv.root / "patches/demo/p2-offset.patch").read_bytes()


def test_regress_runs_the_bound_tests_on_the_new_tree(benv):
    benv.author_all(("p1",))
    # the bound test (tests/test_demo.py::test_ok from META) checks the patched tree it is given
    (benv.root / "tests").mkdir()
    (benv.root / "tests/test_demo.py").write_text(
        "import os, pathlib\n"
        "def test_ok():\n"
        "    tree = pathlib.Path(os.environ['DSV4_TREE_DEMO'])\n"
        "    assert 'line 10 p1' in (tree / 'src/a.py').read_text()\n"
        "    assert 'upstream' in (tree / 'src/a.py').read_text()  # and it is the new base\n")
    rep = run(benv, benv.upstream_next(conflict=False, upstreamed=False, obsolete=False), regress=True)
    assert rep.regress["ok"] is True, rep.regress
    assert rep.regress["patches"][0]["tests"] == {"tests/test_demo.py::test_ok": "passed"}
    assert json.loads(json.dumps(rep.to_dict()))["exit_code"] == 0
