"""`dsv4-patch pin`: move a stack's pin where its patches still apply."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from dsv4_patch import api
from dsv4_patch.errors import EXIT_CONFLICT, Dsv4Error
from tools import _cli as cli
from tools._cli import JsonOpt, ProjOpt, app, out


@app.command()
def pin(
    stack: str = typer.Argument(..., help="Stack to re-pin (STACK@TAG: one of its further releases)."),
    ref: str = typer.Argument(..., help="Tag, commit or release version (e.g. v0.28.0)."),
    source: Optional[str] = typer.Option(None, "--source", help="Source kind to verify through (git, sdist, wheel)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Verify, check and show the change; write nothing."),
    force: bool = typer.Option(False, "--force", help="Move the pin even where patches stop applying."),
    no_check: bool = typer.Option(False, "--no-check", help="Do not check whether the stack applies at REF."),
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Move a stack's pin to REF through the same verification as apply (sha256, commit id).

    First checks that every patch still applies at REF (the rebase `bump` does, into a private
    temporary folder) and names each one that does not. A pin the stack does not apply at is
    refused unless --force; `dsv4-patch bump STACK REF` moves it and refreshes the patches.

    \b
    Examples:
      dsv4-patch pin vllm v0.28.0 --dry-run       # what would change, and does the stack apply there?
      dsv4-patch pin vllm v0.28.0                 # from the PyPI sdist: records version and sha256
      dsv4-patch pin vllm v0.27.1 --source git    # records the full commit hash
      dsv4-patch pin vllm@v0.33.0 v0.33.0 --source git   # a further release's own pin

    Exit codes: 0 ok, 1 error (REF not found, unreachable), 2 usage, 3 patches do not apply at REF
    (nothing written; with --dry-run or --force reported after the change).
    """
    try:
        res = api.pin(cli.load(project), stack, ref, source=source, progress=cli.progress(as_json), dry_run=dry_run,
                      check_applies=not no_check, force=force)
    except Dsv4Error as e:
        cli.fail(e, as_json)
    cli.VIEW.stop()
    verdict = getattr(res, "applies", None)
    broken = verdict is not None and verdict.checked and not verdict.ok
    if not cli.emit(res.to_dict() | {"applies": verdict.to_dict() if verdict else None}, as_json):
        for k, (old, new) in res.changes.items():
            out.print(f"{stack}.{k}: {old} -> {new}", highlight=False, markup=False)
        out.print(("would update" if dry_run else "updated") + " patches/stacks.toml", highlight=False)
        if verdict is not None:
            tag = "[yellow]warning:[/yellow] " if (broken or not verdict.checked) else ""
            out.print(f"{tag}{escape(verdict.summary())}", highlight=False)
            if broken:
                out.print(f"  `dsv4-patch bump {escape(stack)} {escape(ref)}` rebases and refreshes them", highlight=False)
    raise typer.Exit(EXIT_CONFLICT if broken else 0)
