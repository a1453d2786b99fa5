"""`export`: the commits of a tree back into patch files (each release, or an upstream mbox)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Project, StackConfig
from ..errors import Dsv4Error, UsageError
from ..outdir import out_dir
from ._shared import release_fields

if TYPE_CHECKING:
    from ..exporter import ExportResult


def export(project: Project, stack: str, *, release: str | None = None, out: Path | None = None,
           tree: Path | None = None, check: bool = False, remove: tuple[str, ...] = (),
           force: bool = False) -> ExportResult:
    """Export one release's tree (default: the primary's) into its patch folder. A tree that is
    mid-am/rebase, partial, or of another stack or pin is refused; a patch file is deleted only
    when `remove` names it."""
    from ..exporter import export_stack, exportable_problem
    from ..locks import stack_lock

    cfg = project.target(stack, release)
    tree = tree or out_dir(project, out) / cfg.label
    if not tree.exists():
        raise Dsv4Error(f"{tree}: no patched tree",
                        hint=f"run `dsv4-patch apply {cfg.label}` and commit your edits there first")
    from ..advice import export_refusal

    with stack_lock(cfg):
        why = exportable_problem(cfg, tree)
        if why:
            raise Dsv4Error(f"{tree}: refusing to export: {why}", hint="export writes the stack's patch files from a tree "
                            f"built by `dsv4-patch apply {cfg.label}` and edited there")
        refused = export_refusal(tree) if (tree / ".git").exists() else None
        if refused:
            raise Dsv4Error(refused[0], hint=refused[1])
        return export_stack(cfg, tree, check=check, remove=remove, force=force)


@dataclass
class ExportRun:
    """`export STACK` over its releases: each one exported, or skipped (no tree was built)."""
    config: StackConfig
    result: ExportResult | None
    skipped: str = ""

    def to_dict(self) -> dict:
        d = self.result.to_dict() if self.result else {"written": [], "removed": [], "series_changed": False,
                                                       "stale": False}
        return d | release_fields(self.config) | {"skipped": self.skipped,
                                                  "diff": self.result.diff if self.result else ""}


def export_releases(project: Project, stack: str, *, releases: list[str] | None = None, out: Path | None = None,
                    tree: Path | None = None, check: bool = False, remove: tuple[str, ...] = (),
                    force: bool = False) -> list[ExportRun]:
    """Export every release of `stack` whose tree exists (those named must exist).

    With --tree only one release can be meant: the one --release names, else the primary."""
    named = bool(releases) or "@" in stack
    cfgs = project.targets([stack], releases)
    if tree is not None:
        if len(cfgs) > 1 and named:
            raise UsageError("--tree names one tree: pass one --release with it")
        cfgs = cfgs[:1]
        return [ExportRun(cfgs[0], export(project, cfgs[0].label, tree=tree, check=check, remove=remove,
                                                   force=force))]
    runs = []
    for cfg in cfgs:
        path = out_dir(project, out) / cfg.label
        if not path.exists() and not named:
            runs.append(ExportRun(cfg, None, skipped=f"no tree {path} (run `dsv4-patch apply {cfg.label}`)"))
            continue
        runs.append(ExportRun(cfg, export(project, cfg.label, out=out, check=check,
                                          remove=tuple(n for n in remove if (cfg.patch_dir / n).exists()),
                                          force=force)))
    if all(r.result is None for r in runs):
        export(project, cfgs[0].label, out=out, check=check)  # raises: no tree of any release
    return runs


def export_upstream(project: Project, stack: str, *, releases: list[str] | None = None, out: Path | None = None,
                    mbox: Path | None = None, to_stdout: bool = False, signoff_as: str | None = None):
    """`export --upstream`: one mbox per release, from the committed patch files (no tree), each
    message signed off by the sender (`signoff_as`, else the user's git identity; see upstream_mbox).

    Written to OUT/upstream/<stack>.mbox and OUT/upstream/<stack>@<tag>.mbox, or to `mbox` (or
    returned for stdout) when one release is selected. Every release is computed before the first
    file is written: an error (no identity, a malformed patch) writes nothing.
    Returns (rows, mbox bytes for stdout)."""
    from ..upstream_mbox import export_upstream as one
    from ..upstream_mbox import signer_for, write_mbox

    cfgs = project.targets([stack], releases)
    if (mbox is not None or to_stdout) and len(cfgs) > 1:
        raise UsageError(f"{stack} has {len(cfgs)} releases ({', '.join(c.label for c in cfgs)}); --mbox names one file",
                         hint="pick one with --release TAG or STACK@TAG")
    signer = signer_for(project.root, signoff_as)
    if to_stdout:
        row, data = one(cfgs[0], None, signer)
        return [row], data
    done = []
    for cfg in cfgs:
        dest = mbox if mbox is not None else out_dir(project, out) / "upstream" / f"{cfg.label}.mbox"
        row, data = one(cfg, None, signer)
        row.mbox = str(dest)
        done.append((row, dest, data))
    for _, dest, data in done:
        write_mbox(dest, data)
    return [row for row, _, _ in done], None
