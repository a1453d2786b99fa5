"""`dsv4-patch apply` (and --continue / --abort)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from dsv4_patch import api
from dsv4_patch.errors import ConflictError, Dsv4Error, SourceError, UsageError
from tools import _cli as cli
from tools._cli import JsonOpt, OutOpt, ProjOpt, ReleaseOpt, app, err, out


@app.command()
def apply(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to build [default: all]."),
    out_dir: Optional[Path] = OutOpt,
    threeway: bool = typer.Option(True, "--3way/--no-3way", help="Fall back to a 3-way merge (git am --3way)."),
    source: Optional[str] = typer.Option(None, "--source", help="Use only this source kind (git, sdist, wheel, path)."),
    force: bool = typer.Option(False, "--force", help="Replace a tree that has local commits or edits."),
    strict: bool = typer.Option(False, "--strict", help="With no STACK named: an unreachable upstream is an error "
                                "(for CI jobs that must build every stack)."),
    resume: bool = typer.Option(False, "--continue", help="Finish an apply that stopped at a conflict, after you "
                                "resolved it in OUT/.dsv4/failed/<stack>; remembers the resolution."),
    abort: bool = typer.Option(False, "--abort", help="Drop the stopped attempt in OUT/.dsv4/failed/<stack>."),
    release: Optional[List[str]] = ReleaseOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Build the patched tree of each stack: the pinned upstream plus one commit per patch.

    The tree lands in OUT/<stack> on branch dsv4/<stack>, with the base at refs/dsv4/base; a stack
    carried on further upstream releases also gets OUT/<stack>@<tag> for each of them. It is
    built in a staging folder and swapped in only on success. Re-running with nothing changed is a
    no-op. With no STACK named, every stack is built; one whose upstream cannot be reached here
    (DeepGEMM without GitHub or a mirror) is a warning saying what to set, and the run still exits
    0 (--strict makes it an error). Other stacks go on after a conflict; the exit code is the worst.

    When a patch does not apply, the attempt stays in OUT/.dsv4/failed/<stack>, stopped in `git am`
    with conflict markers. Resolve them there, run `apply STACK --continue`, then `export STACK`.
    The resolution is remembered in patches/<stack>/resolutions/ (commit it): the next apply that
    meets the same patch on the same upstream files uses it without stopping.

    \b
    Examples:
      dsv4-patch apply                      # every stack, into build/ of the project
      dsv4-patch apply vllm --out /scratch/trees
      dsv4-patch apply vllm --release v0.33.0   # only build/vllm@v0.33.0 (same as vllm@v0.33.0)
      DSV4_DEEPGEMM_GIT_MIRROR=/mirrors/DeepGEMM.git dsv4-patch apply deepgemm
      dsv4-patch apply --strict             # CI: every stack must build
      dsv4-patch apply sglang --source wheel --json

    \b
    Resolving a conflict:
      dsv4-patch apply vllm                 # exit 3: build/.dsv4/failed/vllm has the markers
      $EDITOR build/.dsv4/failed/vllm/<file>
      dsv4-patch apply vllm --continue      # commits it, applies the rest, moves it to build/vllm
      dsv4-patch export vllm                # the patch file now carries the resolution

    Every .py file the series touches must compile in the built tree (with the Python the tool
    runs on; one whose upstream version does not compile either is skipped); otherwise the tree is
    built and the error names file:line and the patch: fix it there, commit, export.

    Exit codes: 0 ok (an unreachable upstream is a warning unless --strict), 1 error (also: a
    touched .py file does not compile), 2 usage, 3 conflict (a patch does not apply, or is already
    upstream).
    """
    try:
        proj = cli.load(project)
        targets = proj.targets(stacks, release)
        api.out_dir(proj, out_dir)  # a --out on the checkout's tracked paths: one error, not one per target
        if (resume or abort) and not stacks:
            raise UsageError("--continue and --abort need the STACK whose apply stopped",
                             hint="e.g. dsv4-patch apply vllm --continue")
        if (resume or abort) and not release and not any("@" in s for s in stacks):
            # a bare stack name selects all its releases: continue (abort) the ones that stopped
            targets = api.stopped(proj, targets, out=out_dir) or targets
        if abort:
            for cfg in targets:
                gone = api.abort_apply(proj, cfg.label, out=out_dir)
                if not as_json:
                    out.print(f"{cfg.label}: dropped {gone}", highlight=False, markup=False)
            cli.emit([{**api.release_fields(cfg), "status": "aborted"} for cfg in targets], as_json)
            raise typer.Exit(0)
    except Dsv4Error as e:
        cli.fail(e, as_json)
    rows, worst = [], 0
    for cfg in targets:
        name = cfg.label
        try:
            r = api.apply(proj, [cfg.selector], out=out_dir, threeway=threeway, source=source, force=force,
                          progress=cli.progress(as_json), resume=resume)[0]
            cli.VIEW.stop()
            rows.append(r.to_dict() | api.release_fields(cfg))
            if not as_json:
                verb = "unchanged" if r.status == "noop" else "built"
                out.print(f"[green]{escape(name)}[/green]: {verb} {escape(str(r.tree))} ({len(r.commits)} patch{'' if len(r.commits) == 1 else 'es'} on "
                          f"{r.base[:12]} from {escape(r.source)}, {r.seconds:.2f} s)"
                          f"{' — ' + escape(r.note) if r.note else ''}", highlight=False)
        except SourceError as e:
            cli.VIEW.stop()
            optional = not stacks and not strict
            rows.append({**api.release_fields(cfg), "status": "unavailable" if optional else "error",
                         "error": e.message, "details": e.details})
            if not as_json:
                tag = "[yellow]warning:[/yellow] " if optional else "[red]error:[/red] "
                what = "unavailable, not built" if optional else "cannot be built"
                err.print(f"{tag}{escape(name)}: {what}: {escape(e.one_line())}"
                          + (" (pass --strict to make this an error)" if optional else ""), highlight=False)
                if e.details:
                    err.print(e.details, highlight=False, markup=False)
            worst = worst if optional else max(worst, e.exit_code)
        except Dsv4Error as e:
            cli.VIEW.stop()
            rows.append({**api.release_fields(cfg), "status": "conflict" if isinstance(e, ConflictError) else "error",
                         "error": e.message, "hint": e.hint, "exit_code": e.exit_code,
                         "failure": e.report.to_dict() if getattr(e, "report", None) is not None else None})
            if not as_json:
                try:
                    cli.fail(e, False)
                except typer.Exit:
                    pass
            worst = max(worst, e.exit_code)
    cli.emit(rows, as_json)
    raise typer.Exit(worst)
