"""`dsv4-patch regress`: each release's bound tests, --bisect, --level upstream-ci, --record."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from dsv4_patch import api
from dsv4_patch.errors import EXIT_ERROR, EXIT_UNVERIFIED, Dsv4Error, UsageError
from tools import _cli as cli
from tools._cli import JsonOpt, OutOpt, ProjOpt, ReleaseOpt, WideOpt, app, err, out


OUTCOME_COLORS = {"passed": "green", "failed": "red", "missing": "red", "not-verified": "yellow",
                  "partial": "yellow", "no-tests": "yellow"}


@app.command()
def regress(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to test [default: all]."),
    bisect: bool = typer.Option(False, "--bisect", help="Apply one patch at a time; name the first that fails."),
    marker: Optional[str] = typer.Option(None, "-m", help="Only tests with this pytest marker expression (e.g. sm100)."),
    out_dir: Optional[Path] = OutOpt,
    release: Optional[List[str]] = ReleaseOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
    pytest_args: str = typer.Option("", "--pytest-args", help="Extra pytest arguments, e.g. \"-x -k mla\"."),
    record: str = typer.Option("", "--record", help="Record levels for `status --matrix`, e.g. apply,integration; "
                               "a test level also records each bound test's outcome on the pristine pin (one more "
                               "pytest run), which `check` reads."),
    hardware: str = typer.Option("cpu", "--hardware", help="Where this run happened (with --record)."),
    fresh: bool = typer.Option(False, "--fresh", help="Compute every check again: read no result an earlier run "
                               "stored (--record implies it)."),
    require_verified: bool = typer.Option(False, "--require-verified", help="Exit 4 unless every patch was verified "
                                          "(passed, or partial), not only when nothing failed."),
    wide: bool = WideOpt,
    level: str = typer.Option("bound", "--level", metavar="LEVEL",
                              help="bound: the tests bound to each patch (Regression-Test:). upstream-ci: what the "
                              "upstream's own CI says of each patch: its pre-commit hooks that run offline (pinned "
                              "versions, only findings the patch introduces) and its in-tree tests the patch adds "
                              "or changes under its pinned pytest (docs/upstream-ci.md). Record it with "
                              "--record upstream-ci."),
):
    """Run the regression tests bound to each patch (Regression-Test:) against the patched trees.

    Tests get the trees from DSV4_TREE_<STACK> (patched) and DSV4_BASE_<STACK> (pin) through the
    `dsv4_tree` fixture. Each further release of a stack runs in a pytest run of its own, with
    those variables pointing at its trees, DSV4_RELEASE_<STACK> naming it, and
    DSV4_TREE_<STACK>__<TAG> (e.g. DSV4_TREE_VLLM__V0_33_0) as well. pytest's own output goes to
    stderr; a table per patch ends the run, as wide as COLUMNS (else the terminal, else 100
    columns), then one entry per test that did not pass; --wide prints every cell whole.
    A patch is: passed (every bound test passed), failed, missing (no such test id), not-verified
    (every bound test skipped: the reason is shown) or partial (some skipped). A module the tests
    need that is not installed (pytest itself, triton, ...) is named with the command that installs it.
    The first run of the vLLM tests builds two overlay venvs (~5.7 GB, see README) in
    DSV4_VENV_CACHE [default: venvs/ in the tool cache, ~/.cache/dsv4-patch/venvs].
    The project's tests keep the result of each expensive check (a vLLM check script, an SGLang
    probe) under a key of everything it reads, in check-results/ of the tool cache
    (DSV4_PATCH_CACHE [default: ~/.cache/dsv4-patch]), and read it back when nothing it reads
    changed: an edit re-runs only the checks it reaches. --fresh (and --record) computes every
    one again.
    The tests' tmp_path folders live in the run's own scratch folder and are deleted with it; to
    keep them for a look afterwards, pass --pytest-args "--basetemp=DIR" (pytest empties DIR
    when it starts, and regress starts one pytest per release and per --bisect step: name one
    stack and one release to keep everything that run made).

    \b
    Examples:
      dsv4-patch regress vllm
      dsv4-patch regress deepgemm -m sm100   # on a B200
      dsv4-patch regress sglang --bisect
      dsv4-patch regress vllm --release v0.33.0
      dsv4-patch regress vllm --record apply,integration --hardware cpu   # then commit patches/vllm/results
      dsv4-patch regress vllm --fresh        # every check computed again
      dsv4-patch regress --level upstream-ci vllm@v0.33.0   # the upstream's own lint and tests, per patch
      dsv4-patch regress --level upstream-ci --record upstream-ci   # then commit patches/*/results

    Evidence: a patch is verified when its bound tests ran and passed (passed; partial: some
    passed, the rest skipped with a reason, e.g. a CPU run's GPU tests). not-verified (every one
    skipped) and no-tests are no evidence: listed, but the plain command still exits 0 (GPU tests
    skip on a CPU machine); --require-verified makes them exit 4, as bump and the scheduled CI do.

    Exit codes: 0 nothing failed (not-verified patches included, unless --require-verified), 1 a
    test failed or is missing (or an error, e.g. pytest not installed), 2 usage, 3 a stack does not
    apply, 4 with --require-verified: nothing failed but a patch was not verified.
    """
    try:
        proj = cli.load(project)
        if level == "upstream-ci":
            if bisect or marker or pytest_args:
                raise UsageError("--level upstream-ci takes no --bisect, -m or --pytest-args",
                                 hint="it runs the upstream's own hooks and in-tree tests of every patch")
            rep = api.upstream_ci(proj, stacks, releases=release, out=out_dir, fresh=fresh or bool(record),
                                  progress=cli.progress(as_json))
        elif level != "bound":
            raise UsageError(f"unknown --level {level!r}", hint="use bound (the default) or upstream-ci")
        else:
            rep = api.regress(proj, stacks, releases=release, out=out_dir, bisect=bisect, marker=marker,
                              pytest_args=tuple(shlex.split(pytest_args)), log=sys.stderr, progress=cli.progress(as_json),
                              fresh=fresh or bool(record))
        # A run whose tests could not import what they need says nothing about the patches: no record.
        unrecorded = record and rep.missing_modules
        recorded = api.record_levels(proj, rep, record.split(","), hardware, out=out_dir) if record and not unrecorded else []
    except Dsv4Error as e:
        cli.fail(e, as_json)
    cli.VIEW.stop()
    for path in recorded:
        err.print(f"recorded {path}", highlight=False, markup=False)
    if not cli.emit(api.report_dict(proj, rep), as_json):
        if wide:
            t = cli.table("stack", "patch", "outcome", "tests", title=f"regress ({rep.seconds:.1f} s)")
            for r in rep.results:
                c = OUTCOME_COLORS.get(r.outcome, "white")
                label = r.outcome + (f": {r.reason}" if r.reason and r.outcome != "passed" else "")
                t.add_row(escape(r.stack), escape(r.patch), f"[{c}]{escape(label)}[/{c}]",
                          escape(", ".join(f"{n.split('::')[-1]}={o}" for n, o in r.tests.items())))
            if rep.results or not rep.no_patches:
                cli.print_table(t)
        elif rep.results or not rep.no_patches:
            _regress_summary(rep, cli.table_width())
        for label in rep.no_patches:
            out.print(f"{label}: 0 patches in series, nothing to test", highlight=False, markup=False)
        for module, cmd in rep.missing_modules.items():
            out.print(f"[red]missing module:[/red] {escape(module)} is not installed; install it with: {escape(cmd)}",
                      highlight=False)
        if rep.first_bad:
            out.print(f"[red]first failing patch:[/red] {escape(rep.first_bad[0])}/{escape(rep.first_bad[1])}",
                      highlight=False)
    if unrecorded:  # after the table (or --json's one object): stderr says why, one line
        module, cmd = next(iter(rep.missing_modules.items()))
        e = Dsv4Error(f"not recorded: the tests could not import {module} (missing here: "
                      + ", ".join(rep.missing_modules) + ")", hint=f"install it with: {cmd}, then record again")
        err.print(f"[red]error:[/red] {escape(e.one_line())}", highlight=False)
        raise typer.Exit(e.exit_code)
    if rep.ok and require_verified and not getattr(rep, "verified", True):
        err.print("[yellow]unverified:[/yellow] " + escape("; ".join(f"{p} ({why})" for p, why in rep.unverified.items())),
                  highlight=False)
        raise typer.Exit(EXIT_UNVERIFIED)
    raise typer.Exit(0 if rep.ok else EXIT_ERROR)


def _regress_summary(rep, width: int) -> None:
    """The default regress table: counts and whole patch names within `width`, then one entry per
    test that did not pass (its id and why), so nothing needs a wide column."""
    from collections import Counter

    outcomes = Counter(r.outcome for r in rep.results)
    cli.print_lines([f"regress ({rep.seconds:.1f} s): {len(rep.results)} patch{'' if len(rep.results) == 1 else 'es'}: "
                     + ", ".join(f"{n} {o}" for o, n in outcomes.items())], width, style="bold")
    rows = []
    for r in rep.results:
        ran = {n: o for n, o in r.tests.items() if o != "deselected"}
        rows.append([r.stack, r.outcome, f"{sum(o == 'passed' for o in ran.values())}/{len(ran)}", r.patch])
    cli.print_lines(cli.fit_table(["stack", "outcome", "passed", "patch"], rows, width), width)
    said = False
    for r in rep.results:
        bad = {n: o for n, o in r.tests.items() if o not in ("passed", "deselected")}
        if not bad:
            continue
        if not said:
            cli.print_lines(["tests that did not pass (--wide: the full table; --json: everything):"], width)
            said = True
        cli.print_lines([f"  {r.stack} {r.patch}"], width)
        for n, o in bad.items():  # the test id whole on its line, the outcome and reason below it
            cli.print_lines([f"    {n}"], width, indent="      ")
            why = " ".join(r.reasons.get(n, "").split())
            cli.print_lines([f"      {o}" + (f": {why}" if why else "")], width, indent="        ")
