"""bump's Advice lines about a carried series (never fatal: advice that fails is left out): the
target is a release the stack already carries; another carried release's series fits it better
(fewer patches blocked), with the command; a carried patch's message names the old release
(carried_messages.py tells which lines)."""

from __future__ import annotations

import re
from pathlib import Path

from ..carried_messages import refresh_message
from ..config import Project, StackConfig
from ..errors import Dsv4Error
from ..gitcmd import Git
from ..stack import load_stack
from .classify import Index, classify


def message_flags(patches, old: str, new: str, root: Path) -> list[str]:
    """bump's report lines: one per carried patch whose message names the old release."""
    out = []
    for p in patches:
        msg = p.raw.split(b"\ndiff --git ", 1)[0].decode("utf-8", "replace")
        notes = refresh_message(msg, p.name, old, new, root)[1]
        if not notes:
            continue
        ids = sum(1 for n in notes if "-Test " in n)
        prose = [m.group(1) for n in notes if (m := re.search(r": message line (\d+) names ", n))]
        what = ", ".join(filter(None, [f"{ids} test id(s) of {old}'s tests" if ids else "",
                                       f"patch file line(s) {', '.join(prose)}" if prose else ""]))
        out.append(f"{p.name}: its message names {old} ({what}); carried to {new} it still says so: "
                   "`dsv4-patch release add|move` refreshes the test ids that have a counterpart, review the rest")
    return out


def advice(project: Project, cfg: StackConfig, target, g: Git, outcomes, patches) -> list[str]:
    """bump's Advice lines (never fatal: advice that fails is left out)."""
    out = []
    try:
        out += port_hints(project, cfg, target, g, outcomes)
    except Dsv4Error:
        pass
    if cfg.release and target.label != cfg.release:
        out += message_flags(patches, cfg.release, target.label, project.root)
    return out


# --- port hints ----------------------------------------------------------------------------------

def port_hints(project: Project, cfg: StackConfig, target, g: Git, outcomes) -> list[str]:
    """One line each: REF is a release the stack already carries; another carried release's
    series fits REF better than the one being bumped (fewer patches blocked), with the command."""
    try:
        primary = project.stack(cfg.name)
    except Dsv4Error:
        return []
    label, hints = target.label, []
    same = next((r for r in primary.all_releases() if r is not cfg and label in (r.release, r.tag)), None)
    if same is not None:
        hints.append(f"{primary.name} already carries {label} ({project.rel(same.patch_dir)}): "
                     f"`dsv4-patch apply {same.selector}` builds it; `dsv4-patch release move {primary.name} "
                     f"{cfg.release} {label}` would replace it")
    mine = sum(1 for o in outcomes if o.blocking)
    if not mine or target.partial is not None:
        return hints
    best = None
    for r in primary.all_releases():
        if r is cfg or r is same:
            continue
        try:
            patches = load_stack(r).patches
        except Dsv4Error:
            continue
        idx = Index(g, g.path / ".git" / "dsv4-port.index")
        spare = Index(g, g.path / ".git" / "dsv4-port-scratch.index")
        try:
            idx.load(target.base.commit)
            blocked = sum(1 for p in patches if classify(idx, spare, p).blocking)
        finally:
            for ix in (idx, spare):
                ix.path.unlink(missing_ok=True)
        if blocked < mine and (best is None or blocked <= best[1]):
            best = (r, blocked, len(patches))
    if best and same is None:
        r, blocked, n = best
        cmd = f"dsv4-patch release add {primary.name} {label} --from {r.release}"
        hints.append(f"the {r.release} series fits {label} better: {n - blocked} of {n} patches apply, "
                     f"{blocked} blocked (here: {mine} blocked): `{cmd}`")
    return hints
