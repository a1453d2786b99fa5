#!/usr/bin/env python3
"""Scheduled upstream bump (ci/workflows/upstream-bump.yml), runnable locally.

For each stack: `bump --latest` (newest release on the index / tip of the tracked branch), with
the intent and regression tests. Then, on GitHub, by the bump's result:
    ok           every patch found a place and was verified (its regression tests ran and passed,
                 its intent tests show upstream still needs it) -> a branch
                 `dsv4-bump/<stack>-<label>` with the refreshed patches and the new pin, and a pull
                 request whose body is the report
    unverified   every patch found a place, but some patch has no evidence (its tests all skipped,
                 none bound, untestable, no intent test, timeout) -> the same branch, and a DRAFT pull
                 request titled "[unverified] ...", its body the report with an Evidence section
                 naming each unverified patch and why: the refreshed patches are there to look at,
                 never presented as checked
    failed       a regression test failed -> an issue (the report as its body)
    conflicts / upstreamed (or fixed upstream) -> an issue listing them (the report as its body)
    current      already at the newest (decided before any tree is built or test run) -> nothing
    carried      the newest release has its own series already (`release add`) -> nothing: the
                 older series is not carried there a second time

Bounded: the job has a budget (--budget, DSV4_CI_BUDGET, default 4500 s: the workflow allows 90
minutes); before each stack the intent run's bound (DSV4_INTENT_TIMEOUT) and the regression run's
(DSV4_REGRESS_TIMEOUT) are set to what is left divided over the stacks still to go (never above
their own defaults); a stack reached with less than a minute left is not bumped (::error, exit 1).
A patch whose intent tests run past the bound gets `timeout` (unverified), the others their verdicts.

Exit code: 1 an error (a stack could not be bumped, a regression test failed, the budget ran out),
else 3 conflicts / upstreamed patches, else 4 unverified, else 0.

GitHub is reached only through the `gh` CLI and only with --gh (or DSV4_CI_GH=1); without it
the commands are printed (dry run), so the script and its tests run with no GitHub at all. A dry
run leaves the checkout as it is (pins and patch files): the refreshed patches are written to
OUT/<stack>.proposed; a live run rewrites them in the workflow's checkout and commits them.

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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsv4_patch.bump import BumpOptions, bump  # noqa: E402
from dsv4_patch.bump.report import annotations, write_bump  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.bump.semantic import INTENT_TIMEOUT_DEFAULT, TIMEOUT_ENV  # noqa: E402
from dsv4_patch.errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_UNVERIFIED, Dsv4Error, SourceError  # noqa: E402
from dsv4_patch.regress import TIMEOUT_ENV as REGRESS_TIMEOUT_ENV  # noqa: E402

BUDGET_ENV = "DSV4_CI_BUDGET"
BUDGET_DEFAULT = 4500.0  # seconds: the workflow's 90 minutes, less room to publish and upload
REGRESS_TIMEOUT_DEFAULT = 1200.0
MIN_LEFT = 60.0  # a stack reached with less than this left is not bumped
# how bad each result is for the job's exit code (worst wins)
RC_RANK = {0: 0, EXIT_UNVERIFIED: 1, EXIT_CONFLICT: 2, EXIT_ERROR: 3}


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


def publish(run: Runner, stack: str, rep, report_md: Path, base_branch: str, patch_dir: str | None = None,
            start: str | None = None) -> str:
    """`stack` is a label (vllm, vllm@v0.33.0); `patch_dir` its folder relative to the checkout.
    `start`: the commit the job began at; given, the checkout goes back to it after each stack (the
    next stack's branch and PR must not carry this one's commit or written files)."""
    patch_dir = patch_dir or f"patches/{stack}"
    label = rep.new["label"]
    if rep.result in ("ok", "unverified"):
        unverified = rep.result == "unverified"
        branch = f"dsv4-bump/{stack}-{label}"
        run("git", "checkout", "-B", branch)
        run("git", "add", "--", "patches/stacks.toml", patch_dir)
        run("git", "commit", "-m", f"{stack}: bump to {label} (refreshed by dsv4-patch bump"
            + (f"; UNVERIFIED: {len(rep.unverified)} patch(es) without evidence)" if unverified else ")"))
        run("git", "push", "--force", "origin", branch)
        title = f"{stack}: bump to {label}"
        run("gh", "pr", "create", "--base", base_branch, "--head", branch, *(["--draft"] if unverified else []),
            "--title", f"[unverified] {title}" if unverified else title, "--body-file", str(report_md))
        if start:
            run("git", "checkout", "--quiet", start)
        return "draft-pull-request" if unverified else "pull-request"
    run("gh", "issue", "create", "--title", f"{stack}: bump to {label} needs a hand ({rep.result})",
        "--body-file", str(report_md))
    if start and rep.written_to:  # written, then failed its regression tests: not the next stack's to carry
        run("git", "checkout", start, "--", "patches/stacks.toml", patch_dir)
    return "issue"


def bump_stack(root: Path, stack: str, run: Runner, *, regress: bool, base_branch: str, out: Path, emit=print,
               start: str | None = None) -> dict:
    project = load_project(root)
    cfg = project.target(stack)
    # A dry run leaves the checkout as it is: the refreshed patches go to OUT/<stack>.proposed and the
    # pin stays (a live run, on the workflow's own checkout, rewrites both and commits them).
    into = None if run.live else out / f"{stack}.proposed"
    try:
        rep = bump(project, stack, None, latest=True, opts=BumpOptions(regress=regress, out=out, into=into,
                                                                         drop_upstreamed=False))
    except SourceError as e:
        emit(f"::warning::{stack}: upstream unavailable, not bumped ({e.one_line()})")
        return {"stack": stack, "action": "unavailable"}
    if rep.status in ("current", "carried") or rep.new["commit"] == rep.old["commit"]:
        emit(f"::notice::{stack}: {rep.new['label']} is carried already as {rep.new['carried_as']}; nothing to do"
             if rep.status == "carried" else f"::notice::{stack}: already at {rep.new['label']}")
        return {"stack": stack, "action": "none", "seconds": round(rep.seconds, 1)}
    md, _ = write_bump(rep, out / f"{stack}.bump-report.md")
    patch_dir = str(cfg.patch_dir.relative_to(project.root))
    for line in annotations(rep.outcomes, patch_dir, rep.new["label"], rep.semantic, rep.unverified):
        emit(line)
    if into is not None and rep.written_to:
        emit(f"::notice::{stack}: dry run: the refreshed patches are in {into}; the checkout is untouched")
    action = publish(run, stack, rep, md, base_branch, patch_dir, start=start)
    return {"stack": stack, "action": action, "status": rep.result, "report": str(md), "target": rep.new["label"],
            "exit_code": rep.exit_code, "seconds": round(rep.seconds, 1)}


def _budget(raw: str | None) -> float:
    try:
        value = float(raw) if raw else BUDGET_DEFAULT
    except ValueError:
        raise Dsv4Error(f"--budget / {BUDGET_ENV} {raw!r} is not a number of seconds", hint="e.g. --budget 4500")
    if value <= 0:
        raise Dsv4Error(f"--budget / {BUDGET_ENV} {raw!r} must be positive", hint="e.g. --budget 4500")
    return value


def _bound(setting: str | None, default: float, share: float) -> str:
    """The bound for one stack: the caller's setting (or the default), never above its share of the budget."""
    try:
        own = float(setting or default)
    except ValueError:
        own = default
    return str(max(1, int(min(own, share))))


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
    ap.add_argument("--budget", default=os.environ.get(BUDGET_ENV),
                    help=f"seconds the whole job may take [default: {BUDGET_ENV} or {BUDGET_DEFAULT:.0f}]")
    a = ap.parse_args(argv)
    project = load_project(a.project)
    out = a.out or project.root / "build"
    run = Runner(project.root, a.gh)
    rc = 0
    try:
        labels = [c.label for c in project.targets(a.stack, a.release)]
        budget = _budget(a.budget)
    except Dsv4Error as e:
        print(f"::error::{e.one_line()}")
        return 2
    deadline = time.monotonic() + budget
    start = run("git", "rev-parse", "HEAD").strip() if a.gh else None  # each stack's branch starts here
    own = {k: os.environ.get(k) for k in (TIMEOUT_ENV, REGRESS_TIMEOUT_ENV)}

    def worst(code: int) -> None:
        nonlocal rc
        rc = max(rc, code, key=lambda c: RC_RANK.get(c, 3))

    for i, stack in enumerate(labels):
        left = deadline - time.monotonic()
        if left < MIN_LEFT:
            print(f"::error::{stack}: not bumped: the job's budget ({budget:.0f} s, --budget) is spent")
            worst(EXIT_ERROR)
            continue
        share = left / (len(labels) - i)
        bounds = {TIMEOUT_ENV: _bound(own.get(TIMEOUT_ENV), INTENT_TIMEOUT_DEFAULT, share),
                  REGRESS_TIMEOUT_ENV: _bound(own.get(REGRESS_TIMEOUT_ENV), REGRESS_TIMEOUT_DEFAULT, share)}
        os.environ.update(bounds)  # read by the intent run (semantic.py) and the regression run (regress.py)
        try:
            res = bump_stack(project.root, stack, run, regress=not a.no_regress, base_branch=a.base_branch, out=out,
                             start=start)
        except Dsv4Error as e:
            print(f"::error::{stack}: {e.one_line()}")
            worst(EXIT_ERROR)
            continue
        finally:
            for k, v in own.items():  # the caller's own settings, for the next stack's share
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        print(f"{stack}: {res['action']}" + (f" ({res['status']}, {res['report']})" if "status" in res else "")
              + (f" in {res['seconds']} s" if "seconds" in res else ""), flush=True)
        worst(res.get("exit_code", 0))
    print(f"upstream bump: {len(labels)} stack(s) in {budget - (deadline - time.monotonic()):.1f} s, exit {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
