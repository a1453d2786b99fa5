"""`dsv4-patch status`: each stack's pin, patches and trailers; --check, --matrix."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from dsv4_patch import api
from dsv4_patch.errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_UNVERIFIED, Dsv4Error
from tools import _cli as cli
from tools._cli import JsonOpt, ProjOpt, ReleaseOpt, WideOpt, app, out


@app.command()
def status(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to show [default: all]."),
    check: bool = typer.Option(False, "--check", help="Also dry-run whether each stack applies at its pin."),
    no_semantic: bool = typer.Option(False, "--no-semantic", help="With --check: skip the intent tests on the pristine pin."),
    matrix: bool = typer.Option(False, "--matrix", help="Show the verification matrix (levels passed per patch)."),
    release: Optional[List[str]] = ReleaseOpt,
    wide: bool = WideOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Stacks, pins and patches with their metadata.

    \b
    Examples:
      dsv4-patch status
      dsv4-patch status vllm --check        # does every patch still apply at the pin? and do its
                                            # intent tests fail on the pristine pin (semantic)?
      dsv4-patch status vllm@v0.33.0        # one release of a stack carried on several
      dsv4-patch status --matrix            # which verification levels each patch reached

    With --check, each .py file the series touches must also compile (Python the tool runs on).
    A patch is verified at the pin only when its intent tests fail on the pristine pin (`needed`:
    the test catches the problem the patch fixes); any other verdict (untestable, no-intent,
    probe-error, unimportable, timeout, and fixed-upstream: a test that passes without the patch
    proves nothing) leaves it unverified, as does `needed` while one of its intent tests passes on
    the pristine pin (that one cannot fail for the patch's reason). --no-semantic checks only that the stacks apply and says
    the patches were not verified.

    Exit codes: 0 ok, 1 error (with --check: a touched .py file does not compile), 2 usage,
    3 a stack does not apply at its pin (--check), 4 unverified: everything applies but a patch's
    intent tests gave no evidence at the pin (--check).
    """
    try:
        proj = cli.load(project)
        if matrix:
            from tools.cmd_e2e import render_matrix  # the harness owns the matrix

            print(render_matrix(proj.root, stacks, as_json=as_json))
            raise typer.Exit(0)
        rows = api.status(proj, stacks, releases=release, check_apply=check, semantic=not no_semantic,
                          progress=cli.progress(as_json))
    except Dsv4Error as e:
        cli.fail(e, as_json)
    cli.VIEW.stop()
    if cli.emit([{**r.to_dict(), **({"unverified": _unverified_at_pin(r)} if r.applies else {})} for r in rows], as_json):
        raise typer.Exit(_status_rc(rows))
    width = None if wide else cli.table_width()
    for r in rows:
        cli.print_lines([f"{r.label}  {r.upstream}  pin {r.tag or ''} {r.commit}"
                         + ("" if r.primary else f"  (further release; patches in {r.patch_dir})")], width, style="bold")
        cli.print_lines([f"  sources: {', '.join(r.sources)}"] + [f"  {k}: {v}" for k, v in r.info.items()], width)
        cli.print_lines([f"  warning: {w}" for w in r.warnings], width, style="yellow")
        if not r.patches:
            out.print("  (no patches)")
        elif wide:
            t = cli.table("#", "patch", "upstream status", "hardware", "regression tests", "drop when")
            for i, p in enumerate(r.patches, 1):
                t.add_row(str(i), escape(p["name"]), escape(p["upstream_status"] or "-"),
                          escape(", ".join(p["hardware"]) or "-"), str(len(p["regression_tests"])),
                          escape(p["drop_when"] or "-"))
            cli.print_table(t)
        else:  # short cells and the whole name; what does not fit a column is listed below
            cli.print_lines(cli.fit_table(["#", "upstream", "hardware", "tests", "patch"],
                                          [[str(i), (p["upstream_status"] or "-").split()[0], ", ".join(p["hardware"]) or "-",
                                            str(len(p["regression_tests"])), p["name"]] for i, p in enumerate(r.patches, 1)],
                                          width), width)
            cli.print_lines([f"  #{i} drop when: {p['drop_when']}" for i, p in enumerate(r.patches, 1) if p["drop_when"]],
                            width, indent="      ")
        if r.applies is not None:
            if r.applies["ok"]:
                out.print("  applies cleanly at the pin", style="green", highlight=False)
                cli.print_lines([f"  does not compile: {line}" for line in (r.compiles or {}).get("problems", [])],
                                width, style="red")
                cli.print_lines([f"  semantic at the pin: {sem['patch']}: {sem['verdict']} ({sem['reason']})"
                                 for sem in r.semantic or []], width)
                weak = _unverified_at_pin(r)
                if r.semantic is None and r.patches:
                    cli.print_lines(["  not verified: intent tests not run (--no-semantic)"], width, style="yellow")
                elif weak:
                    cli.print_lines([f"  unverified: {p}: {why}" for p, why in weak.items()], width, style="yellow")
            else:
                f = r.applies["failure"]
                said = "not checked" if r.applies.get("unchecked") else "does not apply"
                cli.print_lines([f"  {said}: {f['message'] if isinstance(f, dict) else f}"], width, style="red")
    raise typer.Exit(_status_rc(rows))


def _unverified_at_pin(r) -> dict[str, str]:
    """patch -> why its intent tests at the pin are no evidence: any verdict but `needed`, or `needed`
    while one of them passes on the pristine pin (it cannot fail for the patch's reason)."""
    out = {s["patch"]: f"{s['verdict']} ({s['reason']})" for s in r.semantic or [] if s["verdict"] != "needed"}
    for s in r.semantic or []:
        if s["verdict"] == "needed" and s.get("passes_on_pristine"):
            out[s["patch"]] = (f"{', '.join(s['passes_on_pristine'])} passes on the pristine pin without the patch: "
                               "bind a test that fails without it, or skip that one under DSV4_INTENT as "
                               "'not an intent test'")
    return out


def _status_rc(rows) -> int:
    """3 when a stack does not apply, else 1 when one could not be checked (an error, not a verdict:
    git missing, the source unreachable) or a touched Python file does not compile, else 4 when a
    patch's intent tests gave no evidence at the pin, else 0."""
    if any(r.applies and not r.applies["ok"] and not r.applies.get("unchecked") for r in rows):
        return EXIT_CONFLICT
    if any(r.applies and r.applies.get("unchecked") for r in rows):  # git missing, source unreachable, ...
        return EXIT_ERROR
    if any(r.compiles and not r.compiles["ok"] for r in rows):
        return EXIT_ERROR
    return EXIT_UNVERIFIED if any(r.applies and _unverified_at_pin(r) for r in rows) else 0
