"""`apply` (and --continue/--abort, compile_problems for the touched files), and the trees the tests
ask for (ensure_tree, tree_for_tests: the `dsv4_tree` fixture)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Project, StackConfig, env_key, load_project
from ..errors import ConflictError, Dsv4Error
from ..outdir import BASE_SUFFIX, out_dir

if TYPE_CHECKING:
    from ..sources import Progress
    from ..tree import ApplyResult


def apply(project: Project, stacks: list[str] | None, *, releases: list[str] | None = None, out: Path | None = None,
          threeway: bool = True, source: str | None = None, force: bool = False,
          progress: Progress = None, resume: bool = False) -> list[ApplyResult]:
    """Build every release of the named stacks (or those --release names): OUT/<stack> for the
    primary release, OUT/<stack>@<tag> for each further one. At a conflict, remembered resolutions
    (patches/<stack>/resolutions) are tried; without one the ConflictError says how to resolve and
    `--continue` (resume=True) finishes the stopped apply."""
    from ..tree import build_tree

    results = []
    for s in project.targets(stacks, releases):
        where = out_dir(project, out)
        if resume:
            from .. import resolve  # (and bump, whose resolutions it reuses): only off the plain path

            results.append(resolve.continue_apply(s, where, root=project.root, progress=progress, force=force).apply)
            compile_problems(s, results[-1])
            continue
        try:
            results.append(build_tree(s, where, threeway=threeway, source_kind=source, force=force, progress=progress))
        except ConflictError as e:
            failed = getattr(e.report, "failed_tree", None)
            if not failed or getattr(e.report, "kind", "") == "upstreamed":
                raise
            from .. import resolve

            reused = resolve.reuse_after_conflict(s, where, Path(failed), root=project.root, progress=progress,
                                                 force=force)
            if reused is None:
                marked = resolve.prepare_failed_tree(s, where, Path(failed))
                mid_am = (Path(failed) / ".git" / "rebase-apply").is_dir()  # else no markers were ever due
                e.hint = resolve.next_step_hint(s.label, failed, marked if mid_am else None)
                raise
            results.append(reused.apply)
        compile_problems(s, results[-1])
    return results


def stopped(project: Project, targets: list[StackConfig], *, out: Path | None = None) -> list[StackConfig]:
    """The targets whose last apply stopped at a conflict (a failed tree is kept for them): what a
    bare `apply STACK --continue/--abort` means when the stack has several releases."""
    from .. import resolve

    where = out_dir(project, out)
    return [t for t in targets if resolve.failed_tree(where, t.label).is_dir()]


def abort_apply(project: Project, stack: str, *, out: Path | None = None) -> Path:
    from .. import resolve

    return resolve.abort_apply(project.target(stack), out_dir(project, out))


def ensure_tree(root: Path, stack: str, *, patched: bool = True, out: Path | None = None,
                release: str | None = None) -> Path:
    """The patched tree (or the pristine pin) of `stack` at `release` (default: the primary),
    built or reused under build/: build/vllm, build/vllm.base, build/vllm@v0.33.0(.base)."""
    from ..tree import build_tree

    project = load_project(root)
    cfg = project.target(stack, release)
    name = cfg.label if patched else cfg.label + BASE_SUFFIX
    res = build_tree(cfg, out_dir(project, out), name=name, upto=None if patched else 0, force=not patched)
    return res.tree


def tree_for_tests(root: Path, stack: str, *, patched: bool = True, release: str | None = None,
                   environ: dict | None = None) -> Path:
    """The tree a test asked for through the `dsv4_tree` fixture (tests/conftest.py).

    DSV4_TREE_<STACK>__<TAG> / DSV4_BASE_<STACK>__<TAG> name a given release's trees;
    DSV4_TREE_<STACK> / DSV4_BASE_<STACK> the release under test, which DSV4_RELEASE_<STACK>
    names (the primary when unset). `regress` sets all three; otherwise the tree is built."""
    env = os.environ if environ is None else environ
    prefix = "DSV4_TREE_" if patched else "DSV4_BASE_"
    under_test = env.get("DSV4_RELEASE_" + env_key(stack)) or None  # None: the primary
    want = release or under_test
    if want == under_test and env.get(prefix + env_key(stack)):
        return Path(env[prefix + env_key(stack)])
    if want is not None:
        if env.get(prefix + env_key(stack, want)):
            return Path(env[prefix + env_key(stack, want)])
        cfg = load_project(root).target(stack, want)
        if cfg.primary and under_test is None and env.get(prefix + env_key(stack)):
            return Path(env[prefix + env_key(stack)])  # the primary, asked for by its tag
        want = None if cfg.primary else cfg.release
    return ensure_tree(root, stack, patched=patched, release=want)


def compile_problems(cfg: StackConfig, result: ApplyResult) -> None:
    """Raise (exit 1) when a `.py` file the series touches does not compile in the tree apply just
    built or kept; the tree stays, for the fix. One line per file (the first in the message)."""
    from ..compilecheck import check_work_tree, python_version, remember_tree, tree_known_good
    from ..stack import load_stack

    if result.status == "noop" and tree_known_good(result.tree):  # nothing to parse on the no-op path
        return
    problems = check_work_tree(result.tree, load_stack(cfg).patches)
    if not problems:
        remember_tree(result.tree)
        return
    tree = _shown(result.tree)
    lines = [pr.one_line(tree) for pr in problems]
    raise Dsv4Error(lines[0], hint=f"Python {python_version()} cannot compile it; the tree is built: fix the file in "
                    f"{tree}, commit, then `dsv4-patch export {cfg.label}`",
                    details="\n".join(lines[1:]) or None)


def _shown(p: Path) -> str:
    """`p` relative to the current folder when it is below it, else absolute."""
    try:
        return str(Path(p).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)
