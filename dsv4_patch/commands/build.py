"""`build` (an overlay venv of a patched tree) and `clean`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Project
from ..errors import UsageError
from ..outdir import BASE_SUFFIX, out_dir

if TYPE_CHECKING:
    from ..sources import Progress


def build(project: Project, stack: str, venv: Path, *, release: str | None = None, from_source: bool = False,
          out: Path | None = None, deepgemm_src: Path | None = None, progress: Progress = None):
    """Python overlay build of the patched stack (one release, default the primary) into `venv`
    (see dsv4_patch/build.py)."""
    from .. import build as build_mod
    from ..tree import build_tree

    cfg = project.target(stack, release)
    base_out = out_dir(project, out)
    patched = build_tree(cfg, base_out, progress=progress)
    base = build_tree(cfg, base_out, name=cfg.label + BASE_SUFFIX, upto=0, force=True, progress=progress)
    pkg = next((s for s in cfg.sources if s.kind in ("sdist", "wheel")), None)
    if pkg is None:
        raise UsageError(f"stack {stack} has no PyPI release source", hint="overlay builds need an sdist or wheel pin")
    return build_mod.build_overlay(base.tree, patched.tree, venv, package=pkg.get("package"), version=str(pkg.get("version")),
                                   from_source=from_source, deepgemm_src=deepgemm_src, progress=progress)
