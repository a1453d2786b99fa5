"""bump's advice about a carried series, and the refresh of carried commits' messages.

`advice` (bump's Advice lines): the target is a release the stack already carries; another carried
release's series fits it better; a carried patch's message names the old release. `refresh_message`
moves a `Regression-Test:`/`Intent-Test:` id that names the old release's test module
(`.../v0_33/test_v0_33_x.py`) to the new release's where that test exists, and flags it where it
does not; prose naming the old version is flagged, line by line, never rewritten ("measured on
0.27.1" stays true). `dsv4-patch release add|move` (releases.py) rewrites the commits with it.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config import Project, StackConfig
from ..errors import Dsv4Error
from ..gitcmd import Git
from ..stack import load_stack
from .classify import Index, classify

VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+)*(?:\.post\d+)?)$")


def _rel(project: Project, p: Path) -> str:
    p = Path(p)
    return p.relative_to(project.root).as_posix() if p.is_relative_to(project.root) else str(p)


# --- carried messages ----------------------------------------------------------------------------

def version_forms(label: str) -> tuple[str, str] | None:
    """('0.33.0', 'v0_33') for v0.33.0: the dotted version and the module-name token."""
    m = VERSION_RE.match(label or "")
    if not m:
        return None
    parts = m.group(1).split(".")
    return m.group(1), "v" + "_".join(parts[:2])


def _test_exists(root: Path, node: str) -> bool:
    path, _, name = node.partition("::")
    f = root / path
    if not f.is_file():
        return False
    func = name.split("::")[-1].split("[")[0]
    return not func or re.search(rf"^\s*(async\s+)?def {re.escape(func)}\b", f.read_text(errors="replace"), re.M) is not None


def refresh_message(msg: str, patch: str, old: str, new: str, root: Path) -> tuple[str, list[str]]:
    """(the message with its Regression-Test ids moved to NEW's tests where they exist, one line
    per refreshed trailer and per line that still names OLD)."""
    fo, fn = version_forms(old), version_forms(new)
    if not fo:
        return msg, []
    dotted, token = fo
    notes, out = [], []
    prose = re.compile(rf"(?<![\w.])v?{re.escape(dotted)}(?![\w]|\.\d)|(?<![\w.])v?{re.escape('.'.join(dotted.split('.')[:2]))}(?![\w.]|\.\d)")
    for n, line in enumerate(msg.split("\n"), 1):
        m = re.match(r"^(Regression-Test|Intent-Test):\s*(\S+)\s*$", line)
        if m and token in m.group(2):
            node = m.group(2)
            cand = node.replace(token, fn[1]) if fn else None
            if cand and cand != node and _test_exists(root, cand):
                line = f"{m.group(1)}: {cand}"
                notes.append(f"{patch}: {m.group(1)} {node} -> {cand}")
            else:
                notes.append(f"{patch}: {m.group(1)} {node} names {old}'s test"
                             + (f"; no {cand} exists: port it or keep it knowingly" if cand else ""))
        elif not m and prose.search(line):
            notes.append(f"{patch}: message line {n} names {old}: {line.strip()[:120]}")
        out.append(line)
    return "\n".join(out), notes


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
        hints.append(f"{primary.name} already carries {label} ({_rel(project, same.patch_dir)}): "
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
