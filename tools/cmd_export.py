"""`dsv4-patch export` (each release, or --upstream: an mbox to send)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from dsv4_patch import api
from dsv4_patch.errors import EXIT_ERROR, Dsv4Error, UsageError
from tools import _cli as cli
from tools._cli import JsonOpt, OutOpt, ProjOpt, ReleaseOpt, app, err, out


@app.command()
def export(
    stack: str = typer.Argument(..., help="Stack whose trees to export (STACK@TAG: one release)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 and show the difference if stale."),
    tree: Optional[Path] = typer.Option(None, "--tree", help="Patched tree [default: OUT/<stack>, OUT/<stack>@<tag>]."),
    remove: Optional[List[str]] = typer.Option(None, "--remove", help="Delete this patch file if the tree no longer has its commit (repeat per file)."),
    upstream: bool = typer.Option(False, "--upstream", help="Write an mbox to send upstream from the patch files: "
                                  "our metadata trailers and the team sign-off removed, other people's trailers "
                                  "kept, and YOUR Signed-off-by (git config user.name/user.email) added."),
    mbox: Optional[Path] = typer.Option(None, "--mbox", help="With --upstream: the mbox file, '-' for stdout "
                                        "[default: OUT/upstream/<stack>[@<tag>].mbox]."),
    signoff_as: Optional[str] = typer.Option(None, "--signoff-as", metavar="'NAME <EMAIL>'",
                                             help="With --upstream: sign off as this person instead of "
                                             "git config user.name/user.email."),
    force: bool = typer.Option(False, "--force", help="Overwrite patch files that changed since the tree was built "
                               "from them (a hand edit, a pull of patches/)."),
    release: Optional[List[str]] = ReleaseOpt,
    out_dir: Optional[Path] = OutOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Write patches/<stack>/*.patch and series from the commits on top of refs/dsv4/base.

    Zero churn: apply → export is byte-identical. Add a patch by committing in the tree; edit one
    with `git commit --fixup` and `git rebase -i --autosquash refs/dsv4/base` there; then export.
    Uncommitted edits and new untracked files are refused (commit them first): they would not
    reach the patch files. A patch whose commit you dropped is deleted only when named with
    --remove; a tree mid-am/rebase (a failed build), a partial tree or a tree of another pin is
    refused. A patch file that changed since the tree was built from it (edited by hand, pulled)
    is named and not overwritten unless --force. A stack carried on several upstream
    releases exports each release whose tree exists: OUT/<stack>@<tag> into its own folder
    (patches/<stack>/releases/<tag>). --json prints one object for one release, else a list.

    --upstream writes, per release, the series as one mbox for the upstream project: the
    Upstream-Status, Regression-Test, Hardware, Drop-When and Patch-Filename lines and the team's
    Signed-off-by left out, everything else byte for byte, and the sender's own
    `Signed-off-by: Name <email>` added as `git commit -s` adds it. A DCO sign-off certifies a
    person: you sign before sending. The identity is your git config user.name/user.email (the
    one place the tool reads your git config) or --signoff-as "Name <email>"; with neither
    configured it stops with one line and writes nothing. Apply it upstream with `git am -k`.

    \b
    Examples:
      dsv4-patch export vllm
      dsv4-patch export vllm --check        # CI gate: are the files on disk up to date?
      dsv4-patch export vllm --remove old-fix.patch   # after dropping its commit in the tree
      dsv4-patch export vllm@v0.33.0        # only the v0.33.0 tree (same as --release v0.33.0)
      dsv4-patch export sglang --upstream --mbox /tmp/sglang.mbox && git -C ~/sglang am -k /tmp/sglang.mbox
      dsv4-patch export vllm@v0.33.0 --upstream --signoff-as "Ada Lovelace <ada@example.com>"

    Exit codes: 0 ok, 1 error (with --check: stale, or a release's tree missing; uncommitted work,
    no tree; with --upstream: no user.name/user.email configured), 2 usage (a malformed
    --signoff-as, or --signoff-as without --upstream).
    """
    if upstream:
        return _export_upstream(stack, release, mbox, out_dir, as_json, project, signoff_as)
    if signoff_as is not None:
        cli.fail(UsageError("--signoff-as goes with --upstream", hint="add --upstream"), as_json)
    try:
        runs = api.export_releases(cli.load(project), stack, releases=release, out=out_dir, tree=tree, check=check,
                                   remove=tuple(remove or ()), force=force)
    except Dsv4Error as e:
        cli.fail(e, as_json)
    stale = any(r.result and r.result.stale for r in runs)
    rows = [r.to_dict() | ({} if check else {"diff": ""}) for r in runs]
    if not cli.emit(rows[0] if len(rows) == 1 else rows, as_json):
        for r in runs:
            res, label, rel = r.result, r.config.label, _rel_dir(r.config)
            if res is None and check:  # a release nobody looked at is no pass for the gate
                err.print(f"{label}: not checked, {r.skipped}", highlight=False, markup=False)
            elif res is None:
                out.print(f"{label}: skipped, {r.skipped}", highlight=False, markup=False)
            elif not res.stale:
                out.print(f"{label}: patches are up to date", highlight=False, markup=False)
            elif check:
                err.print(f"{label}: patch files are stale (run `dsv4-patch export {label}`)", highlight=False,
                          markup=False)
                print(res.diff, end="")
            else:
                for n in res.written:
                    out.print(f"wrote {rel}/{n}", highlight=False, markup=False)
                for n in res.removed:
                    out.print(f"removed {rel}/{n}", highlight=False, markup=False)
                if res.series_changed:
                    out.print(f"wrote {rel}/series", highlight=False, markup=False)
    unchecked = any(r.result is None for r in runs)
    raise typer.Exit(EXIT_ERROR if (check and (stale or unchecked)) else 0)


def _rel_dir(cfg) -> str:
    try:
        return str(cfg.patch_dir.relative_to(cfg.root))
    except (ValueError, TypeError):
        return str(cfg.patch_dir)


def _export_upstream(stack, release, mbox, out_dir, as_json, project, signoff_as=None):
    try:
        rows, data = api.export_upstream(cli.load(project), stack, releases=release, out=out_dir,
                                         mbox=None if mbox is None or str(mbox) == "-" else mbox,
                                         to_stdout=mbox is not None and str(mbox) == "-", signoff_as=signoff_as)
    except Dsv4Error as e:
        cli.fail(e, as_json)
    if data is not None:  # --mbox -: the mbox itself is the output
        sys.stdout.buffer.write(data)
        raise typer.Exit(0)
    if not cli.emit([r.to_dict() for r in rows] if len(rows) != 1 else rows[0].to_dict(), as_json):
        for r in rows:
            out.print(f"{r.label}: wrote {r.mbox} ({len(r.patches)} patches, {r.removed_lines} of our lines "
                      f"left out, signed off by {r.signed_off_by}; apply with `git am -k`)", highlight=False,
                      markup=False)
    raise typer.Exit(0)
