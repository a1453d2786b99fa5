"""A stack's patch series loaded from disk: the ordered patch files with their bytes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from . import __version__
from .config import StackConfig
from .errors import PatchFormatError
from .patchfile import PatchFile, load_patch
from .series import SeriesEntry, read_series


@dataclass
class LoadedStack:
    config: StackConfig
    entries: list[SeriesEntry]
    patches: list[PatchFile]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.patches]

    def fingerprint(self, source_kind: str | None) -> str:
        """Same base pin, same source choice and same patch bytes -> same fingerprint."""
        return fingerprint_of(self.config, source_kind, [(p.name, p.raw) for p in self.patches])


def fingerprint_of(config: StackConfig, source_kind: str | None, patches: list[tuple[str, bytes]]) -> str:
    """The fingerprint of (name, bytes) pairs: what LoadedStack.fingerprint gives for those patches."""
    h = hashlib.sha256()
    h.update(json.dumps([__version__, config.raw, source_kind], sort_keys=True, default=str).encode())
    for name, raw in patches:
        h.update(name.encode() + b"\0" + hashlib.sha256(raw).digest())
    return h.hexdigest()


def _entries(config: StackConfig) -> list[SeriesEntry]:
    entries = read_series(config.series_path)
    seen: dict[str, int] = {}
    for e in entries:
        if e.name in seen:
            raise PatchFormatError(f"{config.series_path}:{e.line}: duplicate entry {e.name} (first on line {seen[e.name]})",
                                   hint="a patch is listed once; delete one of the lines")
        seen[e.name] = e.line
    return entries


def load_stack(config: StackConfig) -> LoadedStack:
    entries = _entries(config)
    patches = [load_patch(config.patch_dir / e.name) for e in entries]
    return LoadedStack(config, entries, patches)


def unparsed_fingerprint(config: StackConfig, source_kind: str | None, upto: int | None = None) -> str | None:
    """The fingerprint of the first `upto` patches (default all) from their bytes alone, without
    parsing them: enough to see that an apply is a no-op (the tree was built from these very bytes,
    so they parsed and passed the path checks then). None when reading fails in any way: then the
    full load_stack names the problem."""
    try:
        entries = _entries(config)
        entries = entries if upto is None else entries[:upto]
        return fingerprint_of(config, source_kind, [(e.name, (config.patch_dir / e.name).read_bytes()) for e in entries])
    except (PatchFormatError, OSError, UnicodeError):
        return None
