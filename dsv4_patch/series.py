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
    from .patchfile import patch_name_problem  # the patch-file model owns what a name may be

    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise PatchFormatError(f"{path}: is a folder, not a series file", hint="it must be a text file, one patch name a line") from None
    except OSError as e:
        raise PatchFormatError(f"{path}: cannot read ({e.strerror or e})") from None
    entries = []
    for i, raw_line in enumerate(data.split(b"\n"), 1):
        try:
            raw = raw_line.decode("utf-8")
        except UnicodeDecodeError:
            raise PatchFormatError(f"{path}:{i}: not UTF-8 text", hint="series lines are patch file names (ASCII)") from None
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        why = "no folders" if "/" in line else patch_name_problem(line)
        if why:
            raise PatchFormatError(f"{path}:{i}: series entry {line!r} must be a bare .patch file name in this folder"
                                   f" ({why})")
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
