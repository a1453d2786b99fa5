"""`dsv4-patch export STACK --upstream`: the stack as an mbox ready to send upstream.

Our patch files carry metadata trailers for this repository (Upstream-Status, Regression-Test,
Hardware, Drop-When; Patch-Filename inside built trees). An upstream maintainer must not see
them: this writes one mbox per release with those lines removed and everything else kept byte
for byte (subject, author, date, the rest of the message, `Signed-off-by:` and other trailers,
the diff). It reads the committed patch files (no tree needed) and refuses a patch without a
`Signed-off-by:` trailer, since upstream DCO checks reject it.

Apply the result with `git am -k` (the subjects keep their own [tags], as in `apply`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .config import StackConfig
from .errors import PatchFormatError
from .lint import signoff_problem
from .patchfile import parse_patch_bytes
from .stack import load_stack

OUR_TRAILERS = ("Upstream-Status", "Regression-Test", "Hardware", "Drop-When", "Patch-Filename")
_OURS = re.compile(rb"^(?:" + b"|".join(k.encode() for k in OUR_TRAILERS) + rb"):")


@dataclass
class UpstreamExport:
    stack: str
    release: str | None
    label: str
    mbox: str  # where it was written ("-" for stdout)
    patches: list[str] = field(default_factory=list)
    removed_lines: int = 0  # metadata lines left out, all patches together

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _message_bounds(raw: bytes) -> tuple[int, int]:
    """(start, end) of the commit message: after the mail headers, before the diff."""
    start = raw.index(b"\n\n") + 2
    diff = re.search(rb"^(?:---\n)?diff --git ", raw[start:], re.M)
    return start, start + diff.start() if diff else len(raw)


def upstream_patch(raw: bytes) -> tuple[bytes, int]:
    """One patch with our metadata lines removed: (bytes, how many lines were removed).

    Blank lines the removal leaves doubled (an emptied trailer paragraph) collapse to one, as
    `git commit` cleans a message; the message ends with one newline before `---` and the diff."""
    start, end = _message_bounds(raw)
    kept, removed = [], 0
    for line in raw[start:end].split(b"\n"):
        if _OURS.match(line):
            removed += 1
        else:
            kept.append(line)
    msg: list[bytes] = []
    for line in kept:
        if not line.strip() and (not msg or not msg[-1].strip()):
            continue
        msg.append(line)
    while msg and not msg[-1].strip():
        msg.pop()
    body = b"\n".join(msg) + b"\n" if msg else b""
    rest = raw[end:]
    sep = b"" if rest.startswith(b"---\n") else b"---\n"
    return raw[:start] + body + sep + rest, removed


def export_upstream(stack: StackConfig, dest: Path | None) -> tuple[UpstreamExport, bytes]:
    """The mbox of one release's series (and, unless dest is None, write it to dest)."""
    loaded = load_stack(stack)
    parts, names, removed = [], [], 0
    for p in loaded.patches:
        why = signoff_problem(p)
        if why:
            raise PatchFormatError(f"{stack.patch_dir / p.name}: {why}",
                                   hint="sign it off in the tree (`git rebase --signoff refs/dsv4/base`) and export")
        data, n = upstream_patch(p.raw)
        again = parse_patch_bytes(data, p.name)  # still one well-formed patch, same change
        if again.diff_text != p.diff_text or again.metadata.regression_tests or again.metadata.upstream_status:
            raise PatchFormatError(f"{stack.patch_dir / p.name}: cannot separate its metadata from the message",
                                   hint="keep the metadata trailers on lines of their own at the end of the message")
        parts.append(data if data.endswith(b"\n") else data + b"\n")
        names.append(p.name)
        removed += n
    mbox = b"".join(parts)
    res = UpstreamExport(stack.name, stack.release, stack.label, str(dest) if dest else "-", names, removed)
    if dest is not None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        tmp.write_bytes(mbox)
        tmp.replace(dest)
    return res, mbox
