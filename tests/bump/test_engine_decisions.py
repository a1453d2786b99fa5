"""Engine decisions that one-line mutants of dsv4_patch/ changed without a test going red (issue 29
item 5): each test states the behaviour, and fails when the rule behind it is dropped.

- no-intent: a patch whose named tests all skip as "not an intent test" has no evidence; it must
  never be judged `fixed-upstream`, the one verdict that proposes deleting the patch;
- partial trees: membership is by path component, so `deep_gemm_x/` is not inside `deep_gemm/`;
- a 3-way merge that changes nothing is `upstreamed` by classify itself (the bump's later `git am`
  made the same call, which hid a dropped rule in the classifier)."""

from __future__ import annotations

import re
from pathlib import Path

from bumpkit import edit
from synth import numbered
from test_semantic import INTENT, T, _meta

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.bump.classify import Index, classify, in_tree, inside_part
from dsv4_patch.bump.semantic import NOT_INTENT, judge
from dsv4_patch.config import load_project
from dsv4_patch.gitcmd import Git
from dsv4_patch.patchfile import parse_patch_bytes

SKIP = {"outcome": "skipped", "why": f"{NOT_INTENT}: it checks the unpatched tree, which is the new upstream here"}
PASS = {"outcome": "passed", "why": ""}


def _judge(results: dict, nodes=("t.py::a", "t.py::b")):
    return judge("p.patch", list(nodes), "Regression-Test", results, Path("/nonexistent"), None)


def test_every_test_skipped_as_not_an_intent_test_is_no_intent_never_fixed_upstream():
    s = _judge({"t.py::a": SKIP, "t.py::b": SKIP})
    assert s.verdict == "no-intent" and not s.fixed, s
    assert "not an intent test" in s.reason
    s = _judge({"t.py::a": SKIP}, nodes=("t.py::a",))
    assert s.verdict == "no-intent" and not s.fixed
    s = _judge({"t.py::a[x]": SKIP, "t.py::a[y]": SKIP}, nodes=("t.py::a",))  # parametrized cases
    assert s.verdict == "no-intent"


def test_a_passing_intent_test_beside_a_not_intent_skip_is_evidence():
    s = _judge({"t.py::a": PASS, "t.py::b": SKIP})
    assert s.verdict == "fixed-upstream" and list(s.tests) == ["t.py::a", "t.py::b"]
    s = _judge({"t.py::a": {"outcome": "skipped", "why": "nvcc not found"}, "t.py::b": SKIP})
    assert s.verdict == "untestable" and "nvcc" in s.reason


def test_a_bump_keeps_a_patch_whose_only_tests_are_not_intent_tests(benv):
    """Through a synthetic bump with --drop-upstreamed: the patch applies cleanly, its only named test
    skips under DSV4_INTENT; it is not proposed for dropping, and not dropped."""
    (benv.root / "tests").mkdir()
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    a = edit(numbered(60), "line 10\n", "line 10 fixed\n")
    benv.author({"src/a.py": a}, "[DSV4] p1 fix", body=_meta(T + "test_unpatched_tree_fails"))
    benv.up.write("src/a.py", edit(numbered(60), "line 55\n", "line 55 upstream\n"))  # far from the hunk
    new = benv.up.commit("upstream elsewhere")
    rep = bump(load_project(benv.root), "demo", new, opts=BumpOptions(regress=False, drop_upstreamed=True),
               cache=benv.cache)
    assert [o.status for o in rep.outcomes] == ["clean"]
    assert [s.verdict for s in rep.semantic] == ["no-intent"], rep.semantic
    assert rep.semantic[0].tests[T + "test_unpatched_tree_fails"]["outcome"] == "skipped"
    assert "dropped" not in rep.outcomes[0].note
    assert "p1-fix" in (benv.root / "patches/demo/series").read_text()


def _patch(files: list[str]) -> bytes:
    out = ["From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
           "From: A <a@example.invalid>", "Date: Tue, 1 Dec 2026 10:00:00 +0000", "Subject: [PATCH] x", "",
           "Why.", "", "Upstream-Status: Pending", "Regression-Test: tests/t.py::t", "---"]
    for f in files:
        out += [f"diff --git a/{f} b/{f}", "index 1111111..2222222 100644", f"--- a/{f}", f"+++ b/{f}",
                "@@ -1 +1 @@", "-a", "+b"]
    return ("\n".join(out) + "\n-- \n2.43.0\n\n").encode()


def test_partial_tree_membership_is_by_path_component():
    partial = ["deep_gemm/", "include/cute"]
    assert in_tree("deep_gemm/jit.py", partial) and in_tree("deep_gemm", partial)
    assert in_tree("include/cute/arch.hpp", partial)
    for outside in ("deep_gemm_x/jit.py", "deep_gemmx", "include/cutex/a.hpp", "include/cute_old/a.hpp"):
        assert not in_tree(outside, partial), outside
    p = parse_patch_bytes(_patch(["deep_gemm/a.py", "deep_gemm_x/b.py"]), "x.patch")
    inside, outside = inside_part(p, ["deep_gemm/"])
    assert outside == ["deep_gemm_x/b.py"]
    assert [fd.path for fd in inside.files] == ["deep_gemm/a.py"]
    assert inside_part(parse_patch_bytes(_patch(["deep_gemm_x/b.py"]), "y.patch"), ["deep_gemm"])[0] is None


def test_a_three_way_merge_that_changes_nothing_is_upstreamed_by_the_classifier(tmp_path):
    """Upstream made the patch's change and edited its context: the plain apply and the reverse
    check fail, the 3-way merge succeeds with the tree unchanged. classify itself says upstreamed,
    with that evidence, and leaves the index at the tree it found."""
    repo = tmp_path / "up"
    repo.mkdir()
    g = Git(repo)
    g.run("init", "-q")
    d = "".join(f"d {i}\n" for i in range(1, 21))
    ident = ("-c", "user.name=t", "-c", "user.email=t@example.invalid")
    (repo / "d.txt").write_text(d)
    g.run("add", "d.txt")
    g.run(*ident, "commit", "-qm", "base")
    (repo / "d.txt").write_text(d.replace("d 5\n", "d 5 p5\n"))
    g.run(*ident, "commit", "-qam", "p5")
    raw = g.run("format-patch", "--stdout", "-1", "HEAD").out.encode()
    patch = parse_patch_bytes(raw, "p5.patch")
    g.run("checkout", "-q", "HEAD~1")
    (repo / "d.txt").write_text(d.replace("d 5\n", "d 5 p5\n").replace("d 2\n", "d 2 upstream\n"))
    g.run(*ident, "commit", "-qam", "upstream takes p5 and edits its context")
    idx, scratch = Index(g, repo / ".git" / "t.index"), Index(g, repo / ".git" / "s.index")
    idx.load("HEAD")
    pre = idx.tree()
    o = classify(idx, scratch, patch)
    assert o.status == "upstreamed" and "3-way merge changes nothing" in o.evidence, o
    assert idx.tree() == pre


def test_a_patch_whose_regression_test_failed_is_never_shown_verified():
    """Carrying the v0.33.0 series to vLLM 0.34.0: every patch applied (the reference decode with an
    offset) and every intent test said `needed`, but the rebased reference decode failed its
    regression test (0.34.0's AITER prefill gate read the decode switches). The report's evidence
    column said `verified` beside that failure; the result line said `failed`."""
    from dsv4_patch.bump.classify import Outcome
    from dsv4_patch.bump.evidence import unverified
    from dsv4_patch.bump.rebase import BumpReport
    from dsv4_patch.bump.report import bump_markdown
    from dsv4_patch.bump.semantic import Semantic

    names = ["good.patch", "broken.patch", "no-test.patch"]
    regress = {"ok": False, "verified": False, "patches": [
        {"stack": "demo", "patch": "good.patch", "outcome": "passed", "tests": {"t::a": "passed"}},
        {"stack": "demo", "patch": "broken.patch", "outcome": "failed", "tests": {"t::b": "failed"}},
        {"stack": "demo", "patch": "no-test.patch", "outcome": "not-verified", "tests": {"t::c": "skipped"}}]}
    sem = [Semantic(n, "needed", "its intent test fails on the pristine tree", "Regression-Test") for n in names]
    rep = BumpReport("demo", {"label": "v1", "commit": "a" * 40, "source": "x"},
                     {"label": "v2", "commit": "b" * 40, "source": "x"},
                     [Outcome(n, "offset") for n in names], "", refreshed=names, regress=regress, semantic=sem)
    rep.unverified = unverified(names, sem, regress)
    md = bump_markdown(rep)
    rows = {ln.split("`")[1]: [c.strip() for c in ln.split("|")][3:6]  # the patch table: | # | patch | ...
            for ln in md.splitlines() if re.match(r"\| \d+ \| `", ln)}
    assert rep.result == "failed" and "- result: **failed** (exit 1)" in md
    assert rows["good.patch"] == ["offset", "needed", "verified"]
    assert rows["broken.patch"] == ["offset", "needed", "regression failed"]
    assert rows["no-test.patch"] == ["offset", "needed", "unverified"]
