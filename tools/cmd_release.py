"""`dsv4-patch release add|move|retire`: the releases a stack is carried on (registered by
tools/applypatch.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from dsv4_patch.config import load_project
from dsv4_patch.errors import EXIT_ERROR, Dsv4Error

# dsv4_patch.releases (and the bump engine) are imported inside the commands.

HELP = """The upstream releases a stack is carried on: each has its own pin, sources and series
([stacks.STACK.releases."TAG"] in patches/stacks.toml, patches/STACK/releases/TAG/).

\b
  dsv4-patch release add vllm v0.34.0            # carry the newest older release's series onto 0.34.0
  dsv4-patch release add vllm v0.34.0 --from v0.33.0
  dsv4-patch release move vllm v0.33.0 v0.34.1   # re-pin one release (a bump of it)
  dsv4-patch release retire vllm v0.33.0         # drop a release (git history keeps it)

Exit codes: 0 ok, 1 error (or its regression tests failed), 2 usage, 3 a patch conflicts /
is already upstream (conflict trees in build/, nothing written), 4 written but unverified (its
regression tests did not run, or all skipped: as for `bump`)."""

app = typer.Typer(help=HELP, no_args_is_help=True, add_completion=False, rich_markup_mode=None)

COMMON = {
    "as_json": typer.Option(False, "--json", help="Print machine-readable JSON on stdout."),
    "dry_run": typer.Option(False, "--dry-run", help="Do everything but write stacks.toml and patches/ (the table is shown)."),
}


def _say(quiet: bool):
    return None if quiet else (lambda m: print(f"· {m}", file=sys.stderr, flush=True))


def _fail(e: Dsv4Error, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": e.message, "hint": e.hint, "exit_code": e.exit_code}, indent=1))
    else:
        print(f"error: {e.one_line()}", file=sys.stderr)
    raise typer.Exit(e.exit_code)


def _show(res, as_json: bool, out: Optional[Path], project: Optional[Path]) -> None:
    report = None
    if res.bump_report and res.status not in ("ok", "dry-run"):  # the bump's full report, for the conflicts
        report = (Path(out) if out else load_project(project).root / "build") / f"{res.stack}@{res.tag}.release-report.md"
        try:
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(res.bump_report)
        except OSError:
            report = None
    if as_json:
        print(json.dumps({**res.to_dict(), "report": str(report) if report else None}, indent=1, default=str))
        raise typer.Exit(res.exit_code)
    for o in res.outcomes:
        print(f"{o['patch']}: {o['status']}" + (f" ({', '.join(o['files'])})" if o["status"] in ("conflict", "obsolete") else ""))
    for n in res.notes if res.status not in ("ok", "dry-run") else []:
        print(f"note: {n}")
    if res.status in ("conflicts", "upstreamed", "partial", "failed"):
        trees = ", ".join(res.conflict_trees.values()) or "none"
        again = (f"dsv4-patch release add {res.stack} {res.tag} --from {res.source_release}" if res.action == "add"
                 else f"dsv4-patch release move {res.stack} {res.source_release} {res.tag}")
        what = {"conflicts": "patches conflict", "upstreamed": "patches are already upstream (--drop-upstreamed drops them)",
                "partial": "the target is a partial tree"}.get(res.status, "the bump failed")
        print(f"error: {res.stack} {res.tag}: {what} on {res.tag} (from the {res.source_release} series); nothing written; "
              f"conflict trees: {trees}; resolve there, then `{again} --record-resolution`"
              + (f"; report: {report}" if report else ""), file=sys.stderr)
        raise typer.Exit(res.exit_code)
    from dsv4_patch.releases import message_summary

    for m in message_summary(res.messages):  # every line: --json's "messages"
        print(f"message: {m}")
    for n in res.notes:
        print(f"note: {n}")
    if res.status == "dry-run":
        if res.toml_block:
            print(f"would add to patches/stacks.toml:\n{res.toml_block}")
        print(f"dry run: nothing written ({res.folder} and {res.table} unchanged)")
    else:
        for w in res.written:
            print(f"wrote {w}")
        for r in res.removed:
            print(f"removed {r}")
    if res.history:
        print(res.history)
    if res.regress is not None:
        print(f"regression: ok={res.regress.get('ok')} verified={res.regress.get('verified')}"
              + (f" ({res.regress['error']})" if res.regress.get("error") else ""))
    elif res.result == "unverified":
        print(f"regression tests not run (--no-regress): {res.stack}@{res.tag} is unverified; "
              f"`dsv4-patch regress {res.stack}@{res.tag}` runs them")
    print(f"{res.action} {res.stack} {res.tag}: {res.result} in {res.seconds:.1f} s", file=sys.stderr)
    raise typer.Exit(res.exit_code)


def _run(fn, as_json: bool, out: Optional[Path] = None, project: Optional[Path] = None):
    try:
        _show(fn(), as_json, out, project)
    except Dsv4Error as e:
        _fail(e, as_json)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_ERROR)


@app.command("add")
def add(
    stack: str = typer.Argument(..., help="Stack (vllm, sglang, ...)."),
    tag: str = typer.Argument(..., help="The upstream release to carry: v0.34.0 (a release on the index), or a tag/commit of a git/path source."),
    source_release: Optional[str] = typer.Option(None, "--from", metavar="RELEASE", help="The carried release whose series to start from [default: the newest carried release older than TAG]."),
    record_resolution: bool = typer.Option(False, "--record-resolution", help="Store the resolutions made in the conflict trees of the last attempt first."),
    no_regress: bool = typer.Option(False, "--no-regress", help="Skip the new release's regression tests."),
    no_semantic: bool = typer.Option(False, "--no-semantic", help="Skip the intent tests on the pristine TAG."),
    drop_upstreamed: bool = typer.Option(False, "--drop-upstreamed", help="Leave out patches found already upstream."),
    force: bool = typer.Option(False, "--force", help="Discard conflict trees of earlier attempts that hold work not recorded."),
    source: Optional[str] = typer.Option(None, "--source", help="Use only this source kind."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder for trees [default: ./build]."),
    as_json: bool = COMMON["as_json"],
    dry_run: bool = COMMON["dry_run"],
    project: Optional[Path] = typer.Option(None, "--project", help="Checkout holding patches/stacks.toml."),
):
    """Carry a further upstream release: the series of the nearest carried release, rebased onto TAG.

    What it does: bumps the --from release's series onto TAG (the same engine as `bump`: one
    verdict per patch, remembered resolutions reused), refreshes the carried commits' test ids
    where TAG has its own tests (and lists message lines that still name the old release), then
    writes [stacks.STACK.releases."TAG"] (the pin through the stack's sources: sdist sha256 from
    the package index, the commit its commit_file records) and patches/STACK/releases/TAG/
    together, and runs the new release's regression tests.

    A conflicting patch stops it with exit 3 before anything is written: resolve in the conflict
    tree it names (build/STACK[@FROM].bump-conflicts/PATCH), then run the same command with
    --record-resolution.

    \b
      dsv4-patch release add vllm v0.34.0 --dry-run     # verdicts and the table, nothing written
      dsv4-patch release add vllm v0.34.0 --from v0.33.0 --no-regress

    Exit codes: 0 written and verified, 1 error or failed regression tests, 2 usage (TAG already
    carried), 3 conflict / already upstream (nothing written), 4 written but unverified.
    """
    from dsv4_patch import releases

    def go():
        proj = load_project(project)
        opts = releases.ReleaseOptions(source=source, out=out_dir, regress=not no_regress and not dry_run,
                                       semantic=not no_semantic, drop_upstreamed=drop_upstreamed, force=force,
                                       dry_run=dry_run)
        if record_resolution:
            _record(proj, stack, tag, source_release, out_dir, releases)
        return releases.add(proj, stack, tag, source_release=source_release, opts=opts, progress=_say(as_json))

    _run(go, as_json, out_dir, project)


def _record(proj, stack, tag, source_release, out_dir, releases):
    from dsv4_patch.bump import record_resolutions

    primary = proj.stack(stack)
    src = proj.target(stack, source_release) if source_release else releases.nearest(primary, releases.release_key(primary, tag))
    for r in record_resolutions(proj, src.selector if not src.primary else stack, out=out_dir):
        print(f"{r['patch']}: " + (f"recorded {r['recorded']}" if r["recorded"] else f"not recorded: {r['why']}"),
              file=sys.stderr)


@app.command("move")
def move(
    stack: str = typer.Argument(..., help="Stack (vllm, ...)."),
    frm: str = typer.Argument(..., metavar="FROM", help="The carried release to re-pin (v0.33.0)."),
    to: str = typer.Argument(..., metavar="TO", help="Where it goes: a release version, tag or commit."),
    record_resolution: bool = typer.Option(False, "--record-resolution", help="Store the resolutions made in the conflict trees of the last attempt first."),
    no_regress: bool = typer.Option(False, "--no-regress", help="Skip the moved release's regression tests."),
    no_semantic: bool = typer.Option(False, "--no-semantic", help="Skip the intent tests on the pristine TO."),
    drop_upstreamed: bool = typer.Option(False, "--drop-upstreamed", help="Leave out patches found already upstream."),
    force: bool = typer.Option(False, "--force", help="Discard conflict trees of earlier attempts that hold work not recorded."),
    source: Optional[str] = typer.Option(None, "--source", help="Use only this source kind."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder for trees [default: ./build]."),
    as_json: bool = COMMON["as_json"],
    dry_run: bool = COMMON["dry_run"],
    project: Optional[Path] = typer.Option(None, "--project", help="Checkout holding patches/stacks.toml."),
):
    """Re-pin one carried release: a bump of FROM onto TO; its table and folder become TO's.

    The series of FROM is rebased onto TO; on success the table [stacks.STACK.releases."FROM"]
    is renamed to "TO" in place (comments kept; the pin and the bumped source's version/sha256
    rewritten) and patches/STACK/releases/FROM becomes .../TO, with its resolutions; its results/
    stay in git history (they are no evidence for TO). The primary release ([stacks.STACK]) is
    moved by a plain `bump STACK TO`, which this runs. Conflicts: exit 3, nothing written.

    \b
      dsv4-patch release move vllm v0.33.0 v0.33.1 --dry-run

    Exit codes: 0 written and verified, 1 error or failed regression tests, 2 usage (TO already
    carried), 3 conflict / already upstream (nothing written), 4 written but unverified.
    """
    from dsv4_patch import releases

    def go():
        proj = load_project(project)
        opts = releases.ReleaseOptions(source=source, out=out_dir, regress=not no_regress and not dry_run,
                                       semantic=not no_semantic, drop_upstreamed=drop_upstreamed, force=force,
                                       dry_run=dry_run)
        if record_resolution:
            from dsv4_patch.bump import record_resolutions

            cfg = proj.target(stack, frm)
            for r in record_resolutions(proj, cfg.selector if not cfg.primary else stack, out=out_dir):
                print(f"{r['patch']}: " + (f"recorded {r['recorded']}" if r["recorded"] else f"not recorded: {r['why']}"),
                      file=sys.stderr)
        return releases.move(proj, stack, frm, to, opts=opts, progress=_say(as_json))

    _run(go, as_json, out_dir, project)


@app.command("retire")
def retire(
    stack: str = typer.Argument(..., help="Stack (vllm, ...)."),
    tag: str = typer.Argument(..., help="The further release to stop carrying (never the primary)."),
    force: bool = typer.Option(False, "--force", help="Retire even if its folder has changes git does not hold."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder for trees [default: ./build]."),
    as_json: bool = COMMON["as_json"],
    dry_run: bool = COMMON["dry_run"],
    project: Optional[Path] = typer.Option(None, "--project", help="Checkout holding patches/stacks.toml."),
):
    """Stop carrying a release: remove its tables from stacks.toml and its patch folder.

    Refuses the primary release, and a folder with changes git does not hold (commit them, or
    --force). Prints the commit where git keeps the folder and the table, and how to restore
    them. Its tree under build/ is left alone.

    \b
      dsv4-patch release retire vllm v0.33.0 --dry-run

    Exit codes: 0 retired, 1 a folder with changes git does not hold, 2 usage (the primary, an
    unknown release).
    """
    from dsv4_patch import releases

    def go():
        proj = load_project(project)
        return releases.retire(proj, stack, tag, opts=releases.ReleaseOptions(out=out_dir, force=force, dry_run=dry_run))

    _run(go, as_json, out_dir, project)
