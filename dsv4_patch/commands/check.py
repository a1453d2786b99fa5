"""`check`: lint and compile-check every release's patches; no test, no network."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import Project
from ..outdir import out_dir
from ._shared import cached_base

if TYPE_CHECKING:
    from ..lint import Finding


def check(project: Project, stacks: list[str] | None = None, *, releases: list[str] | None = None) -> list[Finding]:
    """Lint findings of each release; the `.py` files a series touches are compiled as the series
    leaves them, read from the built tree's objects (build/<label>) or computed from a cached pin
    (never fetched: `check` needs no network)."""
    from ..lint import lint_stack
    from ..sources import Cache

    findings = []
    for s in project.targets(stacks, releases):
        def sources(s=s):
            base = cached_base(s, Cache.default())
            return [out_dir(project, None) / s.label / ".git"], (base.git_dir, base.commit) if base else None

        for f in lint_stack(project, s, sources=sources):
            f.stack, f.release = s.name, s.release or ""
            findings.append(f)
    return findings
