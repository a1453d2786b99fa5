"""Export: regenerate patches/<stack>/*.patch and series from the commits on top of the base.

`git format-patch --keep-subject --no-stat --no-signature --zero-commit --full-index` with pinned
diff settings (see gitcmd.py), one file per commit. A commit made by `apply` carries a
`Patch-Filename:` line that names its file; it is stripped here, so apply -> export is
byte-identical. New commits get a file name from their subject.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .config import StackConfig
from .errors import Dsv4Error
from .gitcmd import Git
from .series import read_series, render_series, series_header
from .tree import BASE_REF, adopt_tree

SPLIT = re.compile(rb"^(?=From 0{40} )", re.M)
TRAILER_LINE = re.compile(rb"^Patch-Filename: (.+)\n", re.M)


def strip_trailer(chunk: bytes) -> tuple[bytes, str | None]:
    """Remove the Patch-Filename line `apply` added (see tree.with_trailer); return its value."""
    head_end = chunk.index(b"\n\n") + 2
    diff_at = chunk.find(b"\ndiff --git ", head_end - 1)
    m = TRAILER_LINE.search(chunk, head_end, diff_at if diff_at >= 0 else len(chunk))
    if not m:
        return chunk, None
    return chunk[: m.start()] + chunk[m.end():], m.group(1).decode().strip()


@dataclass
class ExportResult:
    stack: str
    written: list[str] = field(default_factory=list)  # files whose bytes changed (or would)
    removed: list[str] = field(default_factory=list)
    series_changed: bool = False
    diff: str = ""  # unified diff of disk -> exported (for --check)

    @property
    def stale(self) -> bool:
        return bool(self.written or self.removed or self.series_changed)

    def to_dict(self) -> dict:
        return {"stack": self.stack, "written": self.written, "removed": self.removed,
                "series_changed": self.series_changed, "stale": self.stale}


def file_name_for(subject: str, taken: set[str]) -> str:
    s = re.sub(r"^\[[^\]]*\]\s*", "", subject)  # "[ROCm][DSV4] x" -> "x" (tags repeat across a stack)
    while re.match(r"^\[[^\]]*\]\s*", s):
        s = re.sub(r"^\[[^\]]*\]\s*", "", s)
    base = re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")[:60].rstrip("-") or "patch"
    name, n = f"{base}.patch", 2
    while name in taken:
        name, n = f"{base}-{n}.patch", n + 1
    return name


def render_patches(tree: Path) -> list[tuple[str, bytes]]:
    """(file name, bytes) for each commit between refs/dsv4/base and HEAD, in order."""
    g = Git(tree)
    if g.rev(BASE_REF) is None:
        raise Dsv4Error(f"{tree}: no {BASE_REF}", hint="export works on a tree made by `dsv4-patch apply`")
    if g.out("status", "--porcelain", "--untracked-files=no"):
        raise Dsv4Error(f"{tree}: uncommitted changes", hint="commit them (one commit per patch) before exporting")
    raw = g.format_patch(f"{BASE_REF}..HEAD")
    chunks = [c for c in SPLIT.split(raw) if c]
    # --stdout separates patches with one empty line; it belongs to no patch (a file must not
    # change when another patch is appended after it).
    chunks = [c[:-1] if i < len(chunks) - 1 and c.endswith(b"\n\n") else c for i, c in enumerate(chunks)]
    out, taken = [], set()
    for chunk in chunks:
        chunk, name = strip_trailer(chunk)
        if name is None:
            subj = re.search(rb"^Subject: (.*(?:\n .*)*)", chunk, re.M)
            subject = subj.group(1).decode("utf-8", "replace").replace("\n ", " ") if subj else "patch"
            name = file_name_for(subject, taken)
        if name in taken:
            raise Dsv4Error(f"{tree}: two commits claim {name}", hint="fix the Patch-Filename: lines in the commit messages")
        taken.add(name)
        out.append((name, chunk))
    return out


def export_stack(stack: StackConfig, tree: Path, *, check: bool = False) -> ExportResult:
    patches = render_patches(tree)
    res = ExportResult(stack.name)
    old_names = [e.name for e in read_series(stack.series_path)] if stack.series_path.exists() else []
    new_names = [n for n, _ in patches]
    diffs = []
    for name, data in patches:
        path = stack.patch_dir / name
        old = path.read_bytes() if path.exists() else b""
        if old != data:
            res.written.append(name)
            diffs += difflib.unified_diff(old.decode("utf-8", "replace").splitlines(True),
                                          data.decode("utf-8", "replace").splitlines(True),
                                          f"a/{path.name}", f"b/{path.name}")
    res.removed = [n for n in old_names if n not in new_names]
    for n in res.removed:
        diffs.append(f"removed: {n}\n")
    series_text = render_series(new_names, series_header(stack.series_path))
    old_series = stack.series_path.read_text() if stack.series_path.exists() else ""
    if series_text != old_series:
        res.series_changed = True
        diffs += difflib.unified_diff(old_series.splitlines(True), series_text.splitlines(True), "a/series", "b/series")
    res.diff = "".join(diffs)
    if check:
        return res
    stack.patch_dir.mkdir(parents=True, exist_ok=True)
    for name, data in patches:
        if name in res.written:
            tmp = stack.patch_dir / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(stack.patch_dir / name)
    if res.series_changed:
        tmp = stack.patch_dir / ".series.tmp"
        tmp.write_text(series_text)
        tmp.replace(stack.series_path)
    for n in res.removed:
        (stack.patch_dir / n).unlink(missing_ok=True)
    adopt_tree(stack, tree)
    return res
