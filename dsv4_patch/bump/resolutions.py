"""Remembered conflict resolutions (rerere-style), stored in the repo beside the stack:

    patches/<stack>/resolutions/<patch-stem>/<key>.patch

key = sha256 over the failing patch's bytes and the pre-image blob id of every file it touches
(the tree the patch met: new upstream plus the patches before it). Same patch meeting the same
files -> the same key, so a resolution is reused exactly where it was made and nowhere else.
The value is a `git format-patch` of the resolved commit against that pre-image: patch text
only, never upstream files.

A resolution can arrive in a pull request: apply (resolve.py) and bump (rebase.py) both read it
with `read` and lay it only after `refuse_foreign` (one check, shared): it may change only the
files of its own patch, and its paths and symlinks pass the checks patch files pass.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config import StackConfig
from ..errors import PatchFormatError
from ..patchfile import PatchFile, parse_patch_bytes


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


def store(cfg: StackConfig, patch_name: str, k: str, data: bytes, patch_raw: bytes) -> Path:
    """Write a resolution, and beside it (`.source`) the sha256 of the patch version it resolves:
    what lets a later bump lay it against another pre-image (same_version) and never for an
    edited patch."""
    p = path_for(cfg, patch_name, k)
    p.parent.mkdir(parents=True, exist_ok=True)
    for f, content in ((source_path(p), f"sha256 {hashlib.sha256(patch_raw).hexdigest()}\n".encode()), (p, data)):
        tmp = f.with_suffix(f.suffix + ".tmp")
        tmp.write_bytes(content)
        tmp.replace(f)
    return p


def source_path(resolution: Path) -> Path:
    return resolution.with_suffix(".source")


def same_version(resolution: Path, patch: PatchFile) -> bool:
    """Whether `resolution` was recorded for exactly these patch bytes. One with no `.source` (recorded
    before it was kept) answers no: only its exact key (which hashes the patch bytes) can use it."""
    try:
        recorded_for = source_path(resolution).read_text().split()
    except OSError:
        return False
    return recorded_for == ["sha256", hashlib.sha256(patch.raw).hexdigest()]


def recorded(cfg: StackConfig, patch_name: str) -> list[Path]:
    """Every resolution stored for a patch, newest first."""
    d = folder(cfg) / patch_name.removesuffix(".patch")
    return sorted(d.glob("*.patch"), key=lambda f: f.stat().st_mtime, reverse=True) if d.is_dir() else []


def read(found: Path, patch: PatchFile) -> PatchFile:
    """A remembered resolution, parsed as a patch file; what is wrong with it names the file."""
    hint = f"delete {found} (then resolve the conflict of {patch.name} by hand: it is recorded again)"
    try:
        return parse_patch_bytes(found.read_bytes(), patch.name)
    except OSError as e:
        raise PatchFormatError(f"{found}: cannot read this resolution ({e.strerror or e})", hint=hint) from None
    except PatchFormatError as e:
        why = e.message.split(": ", 1)[1] if e.message.startswith(patch.name) else e.message
        why = why.split(": ", 1)[1] if why[:1].isdigit() and ": " in why else why  # "1: ..." (a line number)
        raise PatchFormatError(f"{found}: not a usable resolution of {patch.name}: {why}", hint=hint) from None


def _touched(patch: PatchFile) -> set[str]:
    return {p for fd in patch.files for p in fd.paths}


def foreign_paths(patch: PatchFile, diff: PatchFile) -> list[str]:
    """The paths a remembered resolution changes that the patch itself does not."""
    return sorted({path for fd in diff.files for path in fd.paths} - _touched(patch))


def refuse_foreign(patch: PatchFile, found: Path, diff: PatchFile) -> None:
    """A remembered resolution may change only the files of its own patch, and its paths and links
    pass the checks patch files pass (tree._refuse_unsafe): else one line naming the file."""
    from ..lint import symlink_escapes, unsafe_path

    own = _touched(patch)
    hint = (f"a resolution may change only the files {patch.name} changes; delete {found} "
            "(then resolve the conflict by hand)")
    for fd in diff.files:
        for path in fd.paths:
            why = unsafe_path(path) or (None if path in own else f"a file {patch.name} does not change")
            if why:
                raise PatchFormatError(f"{found}:{fd.line}: {why}: {path}", hint=hint)
        if symlink_escapes(fd):
            raise PatchFormatError(f"{found}:{fd.line}: symlink {fd.path} -> {fd.symlink_target} points outside "
                                   "the tree", hint=hint)
