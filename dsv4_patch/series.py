"""The series file: stack order, one patch file name a line, '#' comments (quilt/Electron style)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import PatchFormatError


@dataclass(frozen=True)
class SeriesEntry:
    name: str
    line: int  # 1-based line in the series file


def read_series(path: Path) -> list[SeriesEntry]:
    if not path.exists():
        raise PatchFormatError(f"{path}: no series file", hint="create it (one patch file name a line), even if empty")
    entries = []
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "/" in line or line.startswith("."):
            raise PatchFormatError(f"{path}:{i}: series entry {line!r} must be a bare file name in this folder")
        entries.append(SeriesEntry(line, i))
    return entries


def render_series(names: list[str], header: str | None = None) -> str:
    head = header if header is not None else "# Patch order for this stack; one file name a line. Written by `dsv4-patch export`.\n"
    return head + "".join(f"{n}\n" for n in names)


def series_header(path: Path) -> str | None:
    """The leading comment block of an existing series file, kept verbatim on export."""
    if not path.exists():
        return None
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    head = []
    for ln in lines:
        if ln.lstrip().startswith("#") or not ln.strip():
            head.append(ln)
        else:
            break
    return "".join(head)
