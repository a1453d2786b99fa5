"""Issue 26 "done when": the scheduled bump script, run as the workflow runs it (a child process,
`python ci/upstream_bump.py`, DSV4_CI_GH unset: a dry run that prints the git/gh commands), on a
synthetic upstream whose new release (a) fixes one patch's problem its own way, (b) still has
another patch's problem, (c) conflicts with a third. The issue it opens says fixed-upstream, needed
and conflict; a stack whose patches all apply and are verified gets a plain PR; one whose tests
cannot give evidence (every one skips, or none is bound) gets a draft PR marked unverified and
exit 4, never an "ok" PR; a stack already at the newest costs no test run. Every run is bounded by
the subprocess timeout: a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bumpkit import BumpEnv, edit
from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "upstream_bump.py"

# The project's tests: each reads the tree the tool hands it (DSV4_TREE_DEMO).
TESTS = '''
import os
from pathlib import Path


def lines():
    return (Path(os.environ["DSV4_TREE_DEMO"]) / "src/a.py").read_text().splitlines()


def test_a_fixed():            # the behaviour patch (a) gives, however it is spelled
    assert any("fixed" in ln for ln in lines())


def test_b_tagged():
    assert lines()[19] == "line 20 p2"


def test_c_tagged():
    assert lines()[39] == "line 40 p3"
'''
# What a release nobody wrote tests for looks like (the version-bound tests at vLLM 0.34.0)
SKIPPING = "import pytest\n\n" + "".join(
    f"\ndef test_{n}():\n    pytest.skip('written for the old release only')\n" for n in ("a_fixed", "b_tagged", "c_tagged"))

T = "tests/test_patches.py::"


def _meta(test: str | None) -> str:
    return "Why and how.\n\nUpstream-Status: Pending\n" + (f"Regression-Test: {T}{test}\n" if test else "")


def _project(env: BumpEnv, bound: bool = True) -> None:
    """Patches (a) line 10 fixed, (b) line 20 tagged, (c) line 40 tagged; upstream's next release
    fixes (a)'s problem at line 55, leaves (b)'s, and rewrites line 40 (c's conflict)."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_patches.py").write_text(TESTS)
    a = numbered(60)
    for subject, old, new, test in [("p1 fix a", "line 10\n", "line 10 fixed\n", "test_a_fixed"),
                                    ("p2 tag b", "line 20\n", "line 20 p2\n", "test_b_tagged"),
                                    ("p3 tag c", "line 40\n", "line 40 p3\n", "test_c_tagged")]:
        a = edit(a, old, new)
        env.author({"src/a.py": a}, f"[DSV4] {subject}", body=_meta(test if bound else None))
    up = edit(edit(numbered(60), "line 55\n", "line 55 fixed upstream, its own way\n"), "line 40\n", "line 40 upstream\n")
    env.up.write("src/a.py", up)
    env.up.commit("the new release")


def _ci(env: BumpEnv, timeout: float = 180) -> tuple[int, str, float]:
    """The workflow's command, in a child process; (exit code, stdout, seconds)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("DSV4_CI_GH", "GITHUB_REF_NAME")}
    environ["DSV4_PATCH_CACHE"] = str(env.cache.root)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(SCRIPT), "--project", str(env.root), "--out", str(env.out)],
                       cwd=env.root, env=environ, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


def _gh(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("dry-run: gh ")]


def _body(gh_line: str) -> str:
    return Path(re.search(r"--body-file (\S+)", gh_line).group(1)).read_text()


def _row(body: str, patch: str) -> list[str]:
    line = next(ln for ln in body.splitlines() if ln.startswith("| ") and f"`{patch}`" in ln)
    return [c.strip() for c in line.strip("|").split("|")]


def _drop_from_series(env: BumpEnv, *names: str) -> None:
    series = env.root / "patches/demo/series"
    series.write_text("".join(ln + "\n" for ln in series.read_text().splitlines() if ln not in names))


def test_the_scheduled_bump_says_fixed_upstream_needed_and_conflict_and_never_green_without_evidence(benv):
    _project(benv)
    saved = benv.tmp / "saved"
    shutil.copytree(benv.root / "patches", saved)

    rc, out, took = _ci(benv)
    [issue] = _gh(out)
    assert issue.startswith("dry-run: gh issue create --title 'demo: bump to ") and "needs a hand (conflicts)" in issue, out
    body = _body(issue)
    # result | semantic columns of the per-patch table: (a) applies but upstream fixed it its own
    # way, (b) applies and is still needed, (c) conflicts and is still needed
    assert _row(body, "p1-fix-a.patch")[2:4] == ["clean", "fixed-upstream"]
    assert _row(body, "p2-tag-b.patch")[2:4] == ["clean", "needed"]
    assert _row(body, "p3-tag-c.patch")[2:4] == ["conflict", "needed"]
    assert "- `p1-fix-a.patch`: **fixed-upstream**" in body and "## Proposed for removal" in body
    assert re.search(r"::error file=patches/demo/p3-tag-c.patch,line=\d+::", out)
    assert rc == 3, out

    # (a) dropped by hand, (c) left out: (b) applies and its tests give evidence -> a plain PR
    _drop_from_series(benv, "p1-fix-a.patch", "p3-tag-c.patch")
    rc, out, took = _ci(benv)
    [pr] = _gh(out)
    assert pr.startswith("dry-run: gh pr create") and "--draft" not in pr and "[unverified]" not in pr, out
    body = _body(pr)
    assert "- result: **ok** (exit 0)" in body and _row(body, "p2-tag-b.patch")[2:5] == ["clean", "needed", "verified"]
    assert rc == 0, out
    # a dry run leaves the checkout alone: the refreshed patches wait in OUT/demo.proposed
    toml = (benv.root / "patches/stacks.toml").read_text()
    rc, out, _ = _ci(benv)
    assert rc == 0 and (benv.root / "patches/stacks.toml").read_text() == toml, out
    assert "dry run: the refreshed patches are in" in out and (benv.out / "demo.proposed/series").is_file(), out

    # the pull request merged (the same bump, in place), then already at the newest: nothing
    # published, and no tree or test on the way (seconds)
    subprocess.run([sys.executable, "-m", "tools.applypatch", "bump", "demo", "--latest", "--no-semantic",
                    "--no-regress", "--project", str(benv.root), "--out", str(benv.out)], cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=180)
    assert (benv.root / "patches/stacks.toml").read_text() != toml
    rc, out, took = _ci(benv)
    assert rc == 0 and _gh(out) == [] and "::notice::demo: already at" in out, out
    print(f"no-op stack: {took:.1f} s")

    # back to the old pin and all three patches, but no test can run on the new release: every
    # bound test skips. The patches still apply ((c) left out) and are written, but nothing verified them
    shutil.rmtree(benv.root / "patches")
    shutil.copytree(saved, benv.root / "patches")
    _drop_from_series(benv, "p3-tag-c.patch")
    (benv.root / "tests/test_patches.py").write_text(SKIPPING)
    rc, out, took = _ci(benv)
    [pr] = _gh(out)
    assert pr.startswith("dry-run: gh pr create") and " --draft " in pr and "'[unverified] demo: bump to " in pr, out
    body = _body(pr)
    assert "- result: **unverified** (exit 4)" in body and "## Evidence: **unverified** (2 of 2 carried patches)" in body
    assert "- `p1-fix-a.patch`: **unverified**: intent: untestable" in body
    assert "regression: not-verified (written for the old release only)" in body
    assert [_row(body, p)[4] for p in ("p1-fix-a.patch", "p2-tag-b.patch")] == ["unverified", "unverified"]
    assert "::warning file=patches/demo/p2-tag-b.patch,line=1::p2-tag-b.patch: unverified on" in out
    assert rc == 4, out


def test_patches_that_bind_no_test_are_unverified_and_a_deleted_test_is_no_ok_either(tmp_path):
    env = BumpEnv(tmp_path)
    _project(env, bound=False)
    _drop_from_series(env, "p3-tag-c.patch")
    saved = env.tmp / "saved"
    shutil.copytree(env.root / "patches", saved)
    rc, out, _ = _ci(env)
    [pr] = _gh(out)
    assert " --draft " in pr and "[unverified]" in pr, out
    body = _body(pr)
    assert "intent: no-intent" in body and "regression: no result" in body
    assert rc == 4, out

    # bound, but the test file is gone: the regression run cannot run them, a failure (as in
    # `regress`): an issue, never a PR
    env2 = BumpEnv(tmp_path / "deleted")
    _project(env2)
    _drop_from_series(env2, "p3-tag-c.patch")
    (env2.root / "tests/test_patches.py").unlink()
    rc, out, _ = _ci(env2)
    [issue] = _gh(out)
    assert issue.startswith("dry-run: gh issue create") and "(failed)" in issue, out
    body = _body(issue)
    assert "- result: **failed** (exit 1)" in body and "pytest could not run the bound tests" in body
    assert rc == 1, out


@pytest.mark.parametrize("budget", ["0", "soon"])
def test_a_bad_budget_is_a_usage_error(benv, budget):
    environ = {**os.environ, "DSV4_PATCH_CACHE": str(benv.cache.root)}
    p = subprocess.run([sys.executable, str(SCRIPT), "--project", str(benv.root), "--budget", budget],
                       env=environ, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout.startswith("::error::--budget") and len(p.stdout.splitlines()) == 1


def test_each_stack_is_published_from_the_commit_the_job_started_at(tmp_path):
    """Live, the next stack's branch must not carry this one's commit (nor a failed one's written files)."""
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT))
    from ci.upstream_bump import Runner, publish

    run = Runner(tmp_path, live=False, emit=lambda m: None)
    ok = SimpleNamespace(result="ok", new={"label": "v2"}, unverified={}, written_to="patches/demo")
    assert publish(run, "demo", ok, tmp_path / "r.md", "main", "patches/demo", start="c0ffee") == "pull-request"
    assert run.log[0] == ["git", "checkout", "-B", "dsv4-bump/demo-v2"] and run.log[-1] == ["git", "checkout", "--quiet", "c0ffee"]
    run.log.clear()
    failed = SimpleNamespace(result="failed", new={"label": "v2"}, unverified={}, written_to="patches/demo")
    assert publish(run, "demo", failed, tmp_path / "r.md", "main", "patches/demo", start="c0ffee") == "issue"
    assert run.log[-1] == ["git", "checkout", "c0ffee", "--", "patches/stacks.toml", "patches/demo"]
