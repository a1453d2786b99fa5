#!/usr/bin/env python3
"""Scheduled upstream bump (ci/workflows/upstream-bump.yml), runnable locally.

For each stack: `bump --latest` (newest release on the index / tip of the tracked branch), with
the regression tests. Then, on GitHub:
    every patch found a place  -> a branch `dsv4-bump/<stack>-<label>` with the refreshed patches
                                  and the new pin, and a pull request whose body is the report
    conflicts remain           -> an issue listing them (the report as its body)
    already at the newest      -> nothing

GitHub is reached only through the `gh` CLI and only with --gh (or DSV4_CI_GH=1); without it
the commands are printed (dry run), so the script and its tests run with no GitHub at all.

    python ci/upstream_bump.py --stack vllm               # dry run
    python ci/upstream_bump.py --stack vllm --release v0.33.0   # bump that release's own series

Every release of each stack (patches/stacks.toml) is bumped by default: each carries its own pin
and series (patches/<stack>/releases/<tag>), and its branch is dsv4-bump/<stack>@<tag>-<label>.
    DSV4_CI_GH=1 python ci/upstream_bump.py               # what the workflow runs
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsv4_patch.bump import BumpOptions, bump  # noqa: E402
from dsv4_patch.bump.report import annotations, write_bump  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.errors import Dsv4Error, SourceError  # noqa: E402


class Runner:
    """Runs (or, in a dry run, records) the git/gh commands that publish a result."""

    def __init__(self, root: Path, live: bool, emit=print):
        self.root, self.live, self.emit, self.log = root, live, emit, []

    def __call__(self, *argv: str) -> str:
        self.log.append(list(argv))
        if not self.live:
            self.emit("dry-run: " + shlex.join(argv))
            return ""
        return subprocess.run(argv, cwd=self.root, check=True, capture_output=True, text=True).stdout


def publish(run: Runner, stack: str, rep, report_md: Path, base_branch: str, patch_dir: str | None = None) -> str:
    """`stack` is a label (vllm, vllm@v0.33.0); `patch_dir` its folder relative to the checkout."""
    patch_dir = patch_dir or f"patches/{stack}"
    label = rep.new["label"]
    if rep.status == "ok":
        branch = f"dsv4-bump/{stack}-{label}"
        run("git", "checkout", "-B", branch)
        run("git", "add", "--", "patches/stacks.toml", patch_dir)
        run("git", "commit", "-m", f"{stack}: bump to {label} (refreshed by dsv4-patch bump)")
        run("git", "push", "--force", "origin", branch)
        run("gh", "pr", "create", "--base", base_branch, "--head", branch,
            "--title", f"{stack}: bump to {label}", "--body-file", str(report_md))
        return "pull-request"
    run("gh", "issue", "create", "--title", f"{stack}: bump to {label} needs a hand ({rep.status})",
        "--body-file", str(report_md))
    return "issue"


def bump_stack(root: Path, stack: str, run: Runner, *, regress: bool, base_branch: str, out: Path, emit=print) -> dict:
    project = load_project(root)
    cfg = project.target(stack)
    try:
        rep = bump(project, stack, None, latest=True, opts=BumpOptions(regress=regress, out=out,
                                                                         drop_upstreamed=False))
    except SourceError as e:
        emit(f"::warning::{stack}: upstream unavailable, not bumped ({e.one_line()})")
        return {"stack": stack, "action": "unavailable"}
    if rep.new["commit"] == rep.old["commit"]:
        emit(f"::notice::{stack}: already at {rep.new['label']}")
        return {"stack": stack, "action": "none"}
    md, _ = write_bump(rep, out / f"{stack}.bump-report.md")
    for line in annotations(rep.outcomes, str(cfg.patch_dir.relative_to(root)), rep.new["label"]):
        emit(line)
    action = publish(run, stack, rep, md, base_branch, str(cfg.patch_dir.relative_to(project.root)))
    return {"stack": stack, "action": action, "status": rep.status, "report": str(md), "target": rep.new["label"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument("--stack", action="append", help="stacks to bump [default: all]")
    ap.add_argument("--gh", action="store_true", default=os.environ.get("DSV4_CI_GH") == "1",
                    help="really push and call gh (default: dry run; DSV4_CI_GH=1 also enables)")
    ap.add_argument("--release", action="append", help="only this upstream release of the stacks (repeatable) "
                    "[default: every release]")
    ap.add_argument("--no-regress", action="store_true")
    ap.add_argument("--base-branch", default=os.environ.get("GITHUB_REF_NAME", "main"))
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    project = load_project(a.project)
    out = a.out or project.root / "build"
    run = Runner(project.root, a.gh)
    rc = 0
    try:
        labels = [c.label for c in project.targets(a.stack, a.release)]
    except Dsv4Error as e:
        print(f"::error::{e.one_line()}")
        return 2
    for stack in labels:
        try:
            res = bump_stack(project.root, stack, run, regress=not a.no_regress, base_branch=a.base_branch, out=out)
        except Dsv4Error as e:
            print(f"::error::{stack}: {e.one_line()}")
            rc = 1
            continue
        print(f"{stack}: {res['action']}" + (f" ({res['status']}, {res['report']})" if "status" in res else ""))
        if res.get("status") not in (None, "ok"):
            rc = max(rc, 3)
    return rc


if __name__ == "__main__":
    sys.exit(main())
