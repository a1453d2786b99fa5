"""The messages of carried commits, when a series moves from one upstream release to another.

A `Regression-Test:`/`Intent-Test:` id that names the old release's test module
(`.../v0_33/test_v0_33_x.py`) is moved to the new release's where that test exists, and flagged
where it does not; prose naming the old version is flagged, line by line, never rewritten
("measured on 0.27.1" stays true). `dsv4-patch release add|move` (releases.py) rewrites the commits
with it; bump's Advice (bump/port_advice.py) only reports what it would flag. Below both, and light:
`release retire` imports none of the bump engine.
"""

from __future__ import annotations

import re
from pathlib import Path

# A release label that is a version: v0.33.0, 0.33.0, v1.2.post1 (release add/move order and key them by it).
VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+)*(?:\.post\d+)?)$")


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
