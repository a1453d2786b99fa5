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
        h = hashlib.sha256()
        h.update(json.dumps([__version__, self.config.raw, source_kind], sort_keys=True, default=str).encode())
        for p in self.patches:
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.raw).digest())
        return h.hexdigest()


def load_stack(config: StackConfig) -> LoadedStack:
    entries = read_series(config.series_path)
    seen: dict[str, int] = {}
    for e in entries:
        if e.name in seen:
            raise PatchFormatError(f"{config.series_path}:{e.line}: duplicate entry {e.name} (first on line {seen[e.name]})",
                                   hint="a patch is listed once; delete one of the lines")
        seen[e.name] = e.line
    patches = [load_patch(config.patch_dir / e.name) for e in entries]
    return LoadedStack(config, entries, patches)
