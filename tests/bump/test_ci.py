"""ci/: workflow YAML structure, the combined-stack check, pr_check annotations, the scheduled
bump's GitHub calls (dry run: recorded, never sent)."""

from __future__ import annotations

from pathlib import Path

import yaml
from bumpkit import edit, numbered
from synth import git

from ci import pr_check, upstream_bump
from ci.combined import check_combined
from dsv4_patch.bump.report import annotation

ROOT = Path(__file__).resolve().parents[2]


def test_workflows_parse_and_call_scripts_that_exist():
    for name, script in (("pr-check.yml", "ci/pr_check.py"), ("upstream-bump.yml", "ci/upstream_bump.py")):
        wf = yaml.safe_load((ROOT / "ci/workflows" / name).read_text())
        assert wf.get(True, wf.get("on")), f"{name}: no triggers"  # YAML 1.1 reads `on` as True
        assert wf["jobs"], name
        for job in wf["jobs"].values():
            assert job["runs-on"] and job["steps"]
            assert all(("uses" in s) != ("run" in s) for s in job["steps"]), name
        runs = " ".join(s.get("run", "") for j in wf["jobs"].values() for s in j["steps"])
        assert script in runs and (ROOT / script).is_file()
    bump = yaml.safe_load((ROOT / "ci/workflows/upstream-bump.yml").read_text())
    assert "schedule" in bump[True] and bump["permissions"]["pull-requests"] == "write"


def test_annotation_escapes_properties_and_data():
    line = annotation("error", "patches/x,y.patch", 12, "a: b\n100%")
    assert line == "::error file=patches/x%2Cy.patch,line=12::a: b%0A100%25"


def _repo(benv):
    """The synthetic project as a git repository with one patch on main."""
    (benv.root / ".gitignore").write_text("build/\n")
    a = numbered(60)
    benv.author({"src/a.py": edit(a, "line 30\n", "line 30 base\n")}, "[DSV4] base patch")
    git(benv.root, "init", "-q")
    git(benv.root, "add", "-A")
    git(benv.root, "commit", "-q", "-m", "main: base patch")
    return edit(a, "line 30\n", "line 30 base\n")


def _branch_with(benv, branch: str, start: str, a: str, old: str, new: str, subject: str) -> None:
    git(benv.root, "checkout", "-q", "-B", branch, start)
    benv.author({"src/a.py": edit(a, old, new)}, subject)
    git(benv.root, "add", "-A")
    git(benv.root, "commit", "-q", "-m", subject)


def test_two_green_prs_that_conflict_together_are_caught(benv):
    a = _repo(benv)
    # PR one landed on main (line 10); PR two, forked before, edits the same line differently
    _branch_with(benv, "pr2", "main", a, "line 10\n", "line 10 pr2\n", "[DSV4] pr two")
    _branch_with(benv, "main", "main", a, "line 10\n", "line 10 pr1\n", "[DSV4] pr one")
    [res] = check_combined(benv.root, "main", "pr2", cache=benv.cache)
    assert res.changed == ["pr-two.patch"] and res.series == ["base-patch.patch", "pr-one.patch", "pr-two.patch"]
    assert not res.ok and res.failure["patch"] == "pr-two.patch"
    lines = []
    assert pr_check.run(benv.root, ["combined"], "main", "pr2", emit=lines.append) == 1
    patch = git(benv.root, "show", "pr2:patches/demo/pr-two.patch").splitlines()
    [err] = [ln for ln in lines if ln.startswith("::error")]
    n = int(err.split("line=")[1].split("::")[0])
    assert err.startswith("::error file=patches/demo/pr-two.patch,") and patch[n - 1].startswith("@@ ")


def test_prs_touching_different_lines_combine(benv):
    a = _repo(benv)
    _branch_with(benv, "pr2", "main", a, "line 50\n", "line 50 pr2\n", "[DSV4] pr two")
    _branch_with(benv, "main", "main", a, "line 10\n", "line 10 pr1\n", "[DSV4] pr one")
    [res] = check_combined(benv.root, "main", "pr2", cache=benv.cache)
    assert res.ok and "3 patches apply together" in res.message


def test_scheduled_bump_opens_a_pr_or_an_issue_dry_run(benv):
    benv.author_all(("p1", "p2"))
    benv.upstream_next(conflict=False, upstreamed=False, obsolete=False)
    run = upstream_bump.Runner(benv.root, live=False, emit=lambda m: None)
    res = upstream_bump.bump_stack(benv.root, "demo", run, regress=False, base_branch="main", out=benv.out,
                                   emit=lambda m: None)
    # every patch applied, but no test ran (regress off, none bound): a draft PR marked unverified, never "ok"
    assert res["action"] == "draft-pull-request" and res["status"] == "unverified" and res["exit_code"] == 4
    gh = [c for c in run.log if c[0] == "gh"]
    assert gh[0][:3] == ["gh", "pr", "create"] and "--draft" in gh[0]
    assert gh[0][gh[0].index("--title") + 1].startswith("[unverified] demo: bump to ")
    assert Path(gh[0][gh[0].index("--body-file") + 1]).read_text().startswith("# Bump demo")
    # upstream moves again, now against p1's line: an issue, not a PR
    benv.up.write("src/a.py", edit(numbered(60), "line 10\n", "line 10 upstream\n"))
    benv.up.commit("upstream edits line 10")
    run = upstream_bump.Runner(benv.root, live=False, emit=lambda m: None)
    notes = []
    res = upstream_bump.bump_stack(benv.root, "demo", run, regress=False, base_branch="main", out=benv.out,
                                   emit=notes.append)
    assert res["action"] == "issue" and res["status"] == "conflicts"
    assert [c[:3] for c in run.log] == [["gh", "issue", "create"]]
    assert any(n.startswith("::error file=patches/demo/p1-clean.patch,line=") for n in notes)
