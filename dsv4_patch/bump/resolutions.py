"""Remembered conflict resolutions (rerere-style), stored in the repo beside the stack:

    patches/<stack>/resolutions/<patch-stem>/<key>.patch

key = sha256 over the failing patch's bytes and the pre-image blob id of every file it touches
(the tree the patch met: new upstream plus the patches before it). Same patch meeting the same
files -> the same key, so a resolution is reused exactly where it was made and nowhere else.
The value is a `git format-patch` of the resolved commit against that pre-image: patch text
only, never upstream files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config import StackConfig
from ..patchfile import PatchFile


def key(patch: PatchFile, pre_blobs: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(hashlib.sha256(patch.raw).digest())
    for path in sorted(pre_blobs):
        h.update(f"\0{path}\0{pre_blobs[path]}".encode())
    return h.hexdigest()


def folder(cfg: StackConfig) -> Path:
    return cfg.patch_dir / "resolutions"


def path_for(cfg: StackConfig, patch_name: str, k: str) -> Path:
    return folder(cfg) / patch_name.removesuffix(".patch") / f"{k}.patch"


def lookup(cfg: StackConfig, patch_name: str, k: str) -> Path | None:
    p = path_for(cfg, patch_name, k)
    return p if p.is_file() else None


def store(cfg: StackConfig, patch_name: str, k: str, data: bytes) -> Path:
    p = path_for(cfg, patch_name, k)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(p)
    return p


def recorded(cfg: StackConfig, patch_name: str) -> list[Path]:
    """Every resolution stored for a patch, newest first."""
    d = folder(cfg) / patch_name.removesuffix(".patch")
    return sorted(d.glob("*.patch"), key=lambda f: f.stat().st_mtime, reverse=True) if d.is_dir() else []
