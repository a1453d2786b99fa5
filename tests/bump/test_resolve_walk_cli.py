"""Remembered resolutions, the walk over a git history, the CLI's exit codes and annotations."""

from __future__ import annotations

import json

from bumpkit import edit, numbered
from typer.testing import CliRunner

from dsv4_patch.bump import record_resolutions, walk
from dsv4_patch.config import load_project
from tools.applypatch import app

from test_bump import run


def test_resolution_is_recorded_reused_and_keyed_to_the_pre_image(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    rep = run(benv, new)
    assert rep.outcomes[1].status == "conflict"
    tree = benv.out / "demo.bump-conflicts/p4-conflict"
    # nothing recorded while markers remain
    [r] = record_resolutions(load_project(benv.root), "demo", out=benv.out)
    assert r["recorded"] is None and "markers" in r["why"]
    resolved = edit(edit(numbered(60), "line 10\n", "line 10 p1\n"), "line 37\n", "line 37 upstream\n")
    (tree / "src/a.py").write_text(edit(resolved, "line 50\n", "line 50 upstream p4\n"))
    [r] = record_resolutions(load_project(benv.root), "demo", out=benv.out)
    assert r["recorded"].startswith("patches/demo/resolutions/p4-conflict/")
    rep = run(benv, new)
    assert [o.status for o in rep.outcomes] == ["clean", "resolved"] and rep.status == "ok"
    assert "line 50 upstream p4" in (benv.root / "patches/demo/p4-conflict.patch").read_text()
    # another upstream state around p4: a different key, so the old resolution is not applied
    benv.up.write("src/a.py", edit(numbered(60), "line 50\n", "line 50 again\n"))
    rep = run(benv, benv.up.commit("upstream again"))
    assert rep.outcomes[1].status == "conflict"


def test_walk_names_the_commit_where_each_patch_first_stops(benv):
    benv.author_all(("p1", "p2"))
    c1 = benv.up.commit("nothing relevant")
    benv.up.write("src/b.txt", edit(numbered(30, "b"), "b 20\n", "b 20 upstream\n"))
    c2 = benv.up.commit("touches p2's line")
    benv.up.write("src/zzz.txt", "x\n")
    c3 = benv.up.commit("later")
    rep = walk(load_project(benv.root), "demo", f"{benv.base}..{c3}", cache=benv.cache)
    assert [s.commit for s in rep.steps] == [benv.base, c1, c2, c3]
    assert rep.first_stop == {"p1-clean.patch": None, "p2-offset.patch": c2[:12]}
    assert [[o.status for o in s.outcomes] for s in rep.steps][2] == ["clean", "conflict"]
    rep2 = walk(load_project(benv.root), "demo", f"{benv.base}..{c3}", step=2, cache=benv.cache)
    assert [s.commit for s in rep2.steps] == [benv.base, c2, c3]


def test_cli_exit_codes_json_and_annotations(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    r = CliRunner().invoke(app, ["bump", "demo", new, "--json", "--no-regress", "--annotate",
                                 "--project", str(benv.root), "--out", str(benv.out)])
    assert r.exit_code == 3, r.output
    payload, _, tail = r.stdout.partition("\n}\n")
    data = json.loads(payload + "\n}")
    assert [p["status"] for p in data["patches"]] == ["clean", "conflict"]
    line = int(data["patches"][1]["hunks"][0]["line"])
    assert (benv.root / "patches/demo/p4-conflict.patch").read_text().splitlines()[line - 1].startswith("@@ ")
    assert f"::error file=patches/demo/p4-conflict.patch,line={line}::" in tail
    assert CliRunner().invoke(app, ["bump", "demo", "--project", str(benv.root)]).exit_code == 2
    assert CliRunner().invoke(app, ["bump", "demo", "no-such-ref", "--project", str(benv.root)]).exit_code == 1
    ok = CliRunner().invoke(app, ["bump", "demo", "--walk", f"{benv.base}..{benv.base}", "--project", str(benv.root)])
    assert ok.exit_code == 0 and "applies at every step" in ok.stdout


def _two_patches_of_one_file_both_conflicting(benv) -> tuple[str, str]:
    """pA and pB change lines 10 and 50 of one file; upstream changes both lines: (upstream text, commit)."""
    a = edit(numbered(60), "line 10\n", "line 10 pA\n")
    benv.author({"src/a.py": a}, "[DSV4] pA")
    benv.author({"src/a.py": edit(a, "line 50\n", "line 50 pB\n")}, "[DSV4] pB")
    up = edit(edit(numbered(60), "line 10\n", "line 10 upstream\n"), "line 50\n", "line 50 upstream\n")
    benv.up.write("src/a.py", up)
    return up, benv.up.commit("upstream changes both lines")


def test_resolutions_recorded_in_one_round_are_reused_in_the_next(benv):
    """Two patches of one file both conflict. Each is resolved in its own conflict tree (the second
    without the first, which was skipped) and both are recorded at once. Next bump: the first is
    reused exactly; the second meets a pre-image that now holds the first, so its key differs, and
    its recorded hunks are applied by their context instead of conflicting again."""
    up, new = _two_patches_of_one_file_both_conflicting(benv)
    rep = run(benv, new)
    assert [o.status for o in rep.outcomes] == ["conflict", "conflict"]
    trees = sorted((benv.out / "demo.bump-conflicts").iterdir())
    (trees[0] / "src/a.py").write_text(edit(up, "line 10 upstream\n", "line 10 upstream pA\n"))
    (trees[1] / "src/a.py").write_text(edit(up, "line 50 upstream\n", "line 50 upstream pB\n"))
    recorded = record_resolutions(load_project(benv.root), "demo", out=benv.out)
    assert all(r["recorded"] for r in recorded), recorded
    rep = run(benv, new)
    assert [o.status for o in rep.outcomes] == ["resolved", "resolved"] and rep.status == "ok"
    assert "another pre-image" in rep.outcomes[1].evidence and "another" not in rep.outcomes[0].evidence
    text = (benv.root / "patches/demo/pb.patch").read_text()
    assert "+line 50 upstream pB" in text


def test_a_resolution_recorded_for_an_earlier_version_of_the_patch_is_never_applied_by_context(benv):
    """The context fallback above is for the same patch meeting another pre-image. A patch edited
    since its resolution was recorded (same name, other bytes) is another patch: laying the old
    resolution would carry the old change and silently drop the edit (seen: a reworked vLLM patch
    carried to 0.34.0 as its previous version). It conflicts instead, and the edit stays."""
    up, new = _two_patches_of_one_file_both_conflicting(benv)
    assert [o.status for o in run(benv, new).outcomes] == ["conflict", "conflict"]
    trees = sorted((benv.out / "demo.bump-conflicts").iterdir())
    (trees[0] / "src/a.py").write_text(edit(up, "line 10 upstream\n", "line 10 upstream pA\n"))
    (trees[1] / "src/a.py").write_text(edit(up, "line 50 upstream\n", "line 50 upstream pB\n"))
    assert all(r["recorded"] for r in record_resolutions(load_project(benv.root), "demo", out=benv.out))
    pb = benv.root / "patches/demo/pb.patch"
    pb.write_text(pb.read_text().replace("+line 50 pB\n", "+line 50 pB edited\n"))  # pB, version 2
    toml = (benv.root / "patches/stacks.toml").read_text()
    rep = run(benv, new, force=True)
    assert [o.status for o in rep.outcomes] == ["resolved", "conflict"], [(o.status, o.evidence) for o in rep.outcomes]
    assert "+line 50 pB edited" in pb.read_text() and "upstream pB" not in pb.read_text()
    assert (benv.root / "patches/stacks.toml").read_text() == toml  # the pin stays
