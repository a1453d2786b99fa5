"""`regress --level upstream-ci`, and the regress report as --json gives it. The test levels' runs
(`regress` itself) are dsv4_patch/regress_releases.py's, since bump and `release` run them too;
api.regress names that one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Project
from ..outdir import BASE_SUFFIX, out_dir
from ._shared import release_fields

if TYPE_CHECKING:
    from ..regress import RegressReport
    from ..sources import Progress


def report_dict(project: Project, rep: RegressReport) -> dict:
    """The regress report for --json: each patch row names its stack and release."""
    d = rep.to_dict()
    for row in d["patches"]:
        row.update(release_fields(project.target(row["stack"])))
    return d


def upstream_ci(project: Project, stacks: list[str] | None = None, *, releases: list[str] | None = None,
                out: Path | None = None, fresh: bool = False, lint: bool = True, tests: bool = True,
                progress: Progress = None) -> RegressReport:
    """`regress --level upstream-ci`: each patch of each release checked as the upstream's own CI
    would (its pre-commit hooks, its in-tree tests under its pinned pytest; dsv4_patch/upstream_ci.py).
    One PatchResult per patch whose rows are the checks."""
    from .. import upstream_ci as uci
    from ..regress import RegressReport
    from ..stack import load_stack
    from ..tree import build_tree

    t0 = time.monotonic()
    base_out = out_dir(project, out)
    provider = uci.load_provider(project.root)
    results, empty = [], []
    for cfg in project.targets(stacks, releases):
        patches = load_stack(cfg).patches
        if not patches:
            empty.append(cfg.label)
            continue
        patched = build_tree(cfg, base_out, progress=progress)
        base = build_tree(cfg, base_out, name=cfg.label + BASE_SUFFIX, upto=0, force=True, progress=progress)

        def pristine(release: str | None, _name: str = cfg.name) -> Path:
            c = project.target(_name if release is None else f"{_name}@{release}")
            return build_tree(c, base_out, name=c.label + BASE_SUFFIX, upto=0, force=True, progress=progress).tree

        rel = uci.Release(cfg.label, patched.tree, base.tree, patches, cfg)
        results += uci.run_release(rel, provider=provider, provider_file=project.root / uci.PROVIDER,
                                   pristine=pristine, lint=lint, tests=tests, fresh=fresh, progress=progress)
    rc = 1 if any(r.outcome in ("failed", "missing") for r in results) else 0
    return RegressReport(results, time.monotonic() - t0, rc, no_patches=empty)
