"""Run each release's bound tests against that release's trees: the work of `dsv4-patch regress`,
which `bump` and `release add|move` reuse for the tree they carried a stack to (so it lives below
all three, not in api.py: bump is imported by api, never the other way round).

The pytest runs and the report are regress.py's; this module builds the trees, sets their
DSV4_TREE_/DSV4_BASE_/DSV4_RELEASE_ variables (release_env) and groups the runs: the primary
releases of all stacks in one, each further release in its own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from .config import StackConfig, env_key
from .outdir import BASE_SUFFIX, out_dir

if TYPE_CHECKING:
    from .config import Project
    from .regress import RegressReport
    from .sources import Progress


def regress(project: Project, stacks: list[str] | None = None, *, releases: list[str] | None = None,
            out: Path | None = None, bisect: bool = False, marker: str | None = None,
            pytest_args: tuple[str, ...] = (), log=None, progress: Progress = None,
            fresh: bool = False) -> RegressReport:
    """Run each release's bound tests against that release's trees (`fresh`: reading no check
    result stored by an earlier run, see regress.RESULT_CACHE_ENV).

    The primary releases of all stacks share one pytest run (as before releases existed); each
    further release gets a run of its own, with DSV4_TREE_<STACK> pointing at its trees and
    DSV4_RELEASE_<STACK> naming it. Results name the release by label (`vllm@v0.33.0`)."""
    from .regress import RegressReport, bound_tests, missing_modules, require_pytest, run_pytest, summarize
    from .stack import load_stack
    from .tree import build_tree

    t0 = time.monotonic()
    cfgs = project.targets(stacks, releases)
    require_pytest()
    # an empty series binds no test: say so instead of fetching an upstream to test nothing on it
    empty = [c.label for c in cfgs if not load_stack(c).patches]
    cfgs = [c for c in cfgs if c.label not in empty]
    base_out = out_dir(project, out)
    if bisect:
        rep = _bisect(project, cfgs, base_out, marker, pytest_args, log, progress, t0, fresh)
        rep.no_patches = empty
        return rep
    groups = [[c for c in cfgs if c.primary]] + [[c] for c in cfgs if not c.primary]
    results, rc = [], 0
    say_ = progress or (lambda m: None)
    missing: dict[str, str] = {}
    for group in filter(None, groups):
        trees, stack_patches = [], []
        for cfg in group:
            patched = build_tree(cfg, base_out, progress=progress)
            base = build_tree(cfg, base_out, name=cfg.label + BASE_SUFFIX, upto=0, force=True, progress=progress)
            trees.append((cfg, patched.tree, base.tree))
            stack_patches.append((cfg.label, load_stack(cfg).patches))
        nodes = bound_tests([p for _, ps in stack_patches for p in ps])
        if not nodes:
            continue
        say_(f"running {len(nodes)} bound test ids" + ("" if group[0].primary else f" for {group[0].label}"))
        grc, outcomes = run_pytest(project.root, nodes, release_env(trees), marker=marker,
                                   pytest_args=pytest_args, log=log, fresh=fresh)
        rc = rc or grc
        results += summarize(stack_patches, outcomes)
        missing.update(missing_modules(outcomes))
    return RegressReport(results, time.monotonic() - t0, rc, missing_modules=missing, no_patches=empty)


def release_env(trees: list[tuple[StackConfig, Path, Path]]) -> dict[str, str]:
    """DSV4_TREE_/DSV4_BASE_ variables for the trees of one pytest run (see tree_for_tests)."""
    env = {}
    for cfg, patched, base in trees:
        for key in {cfg.env_key, env_key(cfg.name)}:  # its own name, and "the release under test"
            env[f"DSV4_TREE_{key}"], env[f"DSV4_BASE_{key}"] = str(patched), str(base)
        env[f"DSV4_RELEASE_{env_key(cfg.name)}"] = cfg.release or ""
    return env


def _bisect(project, cfgs, base_out, marker, pytest_args, log, progress, t0, fresh) -> RegressReport:
    """Apply each release of each stack one patch at a time; name the first patch whose bound
    tests fail."""
    from .regress import RegressReport, bound_tests, missing_modules, run_pytest, summarize
    from .stack import load_stack
    from .tree import build_tree

    results = []
    rc = 0
    for cfg in cfgs:
        patches = load_stack(cfg).patches
        base = build_tree(cfg, base_out, name=cfg.label + BASE_SUFFIX, upto=0, force=True, progress=progress)
        for k in range(1, len(patches) + 1):
            tree = build_tree(cfg, base_out, name=cfg.label + ".bisect", upto=k, force=True, progress=progress)
            nodes = bound_tests(patches[:k])
            if progress:
                progress(f"bisect {cfg.label}: {k}/{len(patches)} {patches[k - 1].name}")
            rc, outcomes = run_pytest(project.root, nodes, release_env([(cfg, tree.tree, base.tree)]),
                                      marker=marker, pytest_args=pytest_args, log=log,
                                      fresh=fresh) if nodes else (0, {})
            step = summarize([(cfg.label, patches[:k])], outcomes)
            if any(r.outcome in ("failed", "missing") for r in step):
                return RegressReport(step, time.monotonic() - t0, rc, first_bad=(cfg.label, patches[k - 1].name),
                                     missing_modules=missing_modules(outcomes))
            results = [r for r in results if r.stack != cfg.label] + step
    return RegressReport(results, time.monotonic() - t0, rc)
