"""`dsv4-patch check`: lint every release's patches."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from dsv4_patch import api
from dsv4_patch.errors import EXIT_ERROR, Dsv4Error
from tools import _cli as cli
from tools._cli import JsonOpt, ProjOpt, ReleaseOpt, app, err, out


@app.command()
def check(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to lint [default: all]."),
    release: Optional[List[str]] = ReleaseOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Lint the stacks: series vs folder, patch format and metadata (Signed-off-by included), test
    ids, whitespace, path safety; every release of each stack. stacks.toml is checked against its
    schema first (an error there is one line naming file:line and the key). Each .py file a series
    touches must compile as the series leaves it: read from the built tree (build/<stack>) or
    computed from a cached pin; never fetched (without either, a `note:` line says so). A
    Regression-Test that a result file (`regress --record`) shows passing on the pristine pin, for
    today's pin, patch bytes and test code, is an error: it cannot fail for the patch's reason.

    Needs no upstream tree. Each finding is one line `file:line: error: message`.

    \b
    Examples:
      dsv4-patch check
      dsv4-patch check sglang --json
      dsv4-patch check vllm --release v0.33.0

    Exit codes: 0 clean, 1 findings (or an error), 2 usage.
    """
    try:
        findings = api.check(cli.load(project), stacks, releases=release)
    except Dsv4Error as e:
        cli.fail(e, as_json)
    errors = [f for f in findings if f.severity == "error"]
    if not cli.emit([f.to_dict() for f in findings], as_json):
        for f in findings:
            err.print(str(f), highlight=False, markup=False)
        if not errors:
            out.print("check: all stacks clean")
    raise typer.Exit(EXIT_ERROR if errors else 0)
