"""Bump decisions that survived the engine mutation run (benchmarks/mutate_engine.py, seed 29;
docs/engine-mutation-report.md): each test states what a user sees, and fails when the rule behind
it is dropped or bent.

- a conflict report names the hunks git cannot apply, and only those: a clean hunk before a
  conflicting one in the same file is not blamed (the one-hunk patch cut for each hunk ends where the
  hunk ends), and when every failing hunk merges on its own the ones that apply cleanly stay out;
- a carried patch is verified exactly when its intent tests say `needed` and its regression tests
  passed (or passed in part); otherwise each missing piece of evidence is named."""

from __future__ import annotations

from pathlib import Path

from synth import Upstream, numbered

from dsv4_patch.bump.classify import Index, failing_hunks
from dsv4_patch.bump.evidence import unverified
from dsv4_patch.bump.semantic import Semantic
from dsv4_patch.gitcmd import Git
from dsv4_patch.patchfile import parse_patch_bytes


def _two_hunk_patch(tmp_path: Path, upstream_line: str):
    """A patch changing lines 10 and 50 of a.txt (two hunks), and an upstream that then rewrote
    `upstream_line`; returns (scratch index, pre-image tree, patch)."""
    up = Upstream(tmp_path / "up")
    up.write("a.txt", numbered(60))
    up.commit("base")
    up.write("a.txt", numbered(60).replace("line 10\n", "line ten\n").replace("line 50\n", "line fifty\n"))
    g = Git(up.path)
    g.run("add", "-A")
    g.run("-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "patch")
    raw = g.raw("format-patch", "--stdout", "-1", "HEAD")
    g.run("reset", "-q", "--hard", "HEAD~1")
    up.write("a.txt", numbered(60).replace(upstream_line, upstream_line[:-1] + " upstream\n"))
    up.commit("upstream")
    return Index(g, tmp_path / "s.index"), g.out("rev-parse", "HEAD^{tree}"), parse_patch_bytes(raw, "p.patch")


def test_a_clean_hunk_before_a_conflicting_one_is_not_blamed(tmp_path):
    """Upstream rewrote line 49, next to the second hunk's change: only that hunk conflicts."""
    spare, pre, patch = _two_hunk_patch(tmp_path, "line 49\n")
    second = patch.files[0].hunks[1]
    assert [(i.file, i.line) for i in failing_hunks(spare, pre, patch, ["a.txt"])] == [("a.txt", second.line)]


def test_hunks_that_merge_alone_name_only_the_one_that_does_not_apply(tmp_path):
    """Upstream rewrote line 47, inside the second hunk's context but two lines from its change: the
    hunk no longer applies as it is, its 3-way merge is clean; the first hunk applies. The report
    names the second hunk, not both."""
    spare, pre, patch = _two_hunk_patch(tmp_path, "line 47\n")
    second = patch.files[0].hunks[1]
    assert [(i.file, i.line) for i in failing_hunks(spare, pre, patch, ["a.txt"])] == [("a.txt", second.line)]


def _sem(patch: str, verdict: str) -> Semantic:
    return Semantic(patch, verdict, f"because {verdict}", "Regression-Test")


def test_a_patch_is_verified_exactly_when_intent_says_needed_and_regress_passed():
    """The bump's verdict on each carried patch: both pieces of evidence, or the reasons it lacks."""
    regress = {"patches": [{"patch": "a.patch", "outcome": "passed"}, {"patch": "b.patch", "outcome": "partial"},
                           {"patch": "c.patch", "outcome": "not-verified", "reason": "needs a GPU"},
                           {"patch": "d.patch", "outcome": "passed"}]}
    semantic = [_sem("a.patch", "needed"), _sem("b.patch", "needed"), _sem("c.patch", "needed"),
                _sem("d.patch", "untestable")]
    got = unverified(["a.patch", "b.patch", "c.patch", "d.patch", "e.patch"], semantic, regress)
    assert got == {"c.patch": ["regression: not-verified (needs a GPU)"],
                   "d.patch": ["intent: untestable (because untestable)"],
                   "e.patch": ["intent: no verdict", "regression: no result (the run did not report it)"]}
    # a failed regression test is a failure of its own (exit 1), not "unverified"
    assert unverified(["a.patch"], semantic[:1], {"patches": [{"patch": "a.patch", "outcome": "failed"}]}) == {}
    # a check that did not run is named, with the switch that skipped it
    assert unverified(["a.patch"], None, None, regress_asked=False) == {
        "a.patch": ["intent tests not run (--no-semantic)", "regression tests not run (--no-regress)"]}
    assert unverified(["a.patch"], semantic[:1], {"error": "pytest crashed"}) == {"a.patch": ["regression: pytest crashed"]}
