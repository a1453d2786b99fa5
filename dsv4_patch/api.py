"""The commands layer: one function per CLI command. Returns data; never prints.

cli (tools/applypatch.py) -> api -> domain (config, stack, tree, exporter, lint, regress)
-> adapters (gitcmd, sources).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .config import Project, StackConfig, env_key, load_project
from .errors import ConflictError, Dsv4Error, UsageError
from .outdir import BASE_SUFFIX, out_dir
from .regress_releases import regress  # noqa: F401 (the regress command, as the cli and ci/pr_check.py name it)

# Each command imports what it needs when it runs: a no-op `apply` should not pay for lint,
# regress, export, pin (and their imports) on every start. Only the types are named here.
if TYPE_CHECKING:
    from .exporter import ExportResult
    from .lint import Finding
    from .pinning import PinResult
    from .regress import RegressReport
    from .sources import Cache, Progress
    from .tree import ApplyResult


def release_fields(cfg: StackConfig) -> dict:
    """What every --json row says about the release it is for."""
    return {"stack": cfg.name, "release": cfg.release, "primary": cfg.primary, "label": cfg.label}


# ---------------------------------------------------------------- apply / export / check
def apply(project: Project, stacks: list[str] | None, *, releases: list[str] | None = None, out: Path | None = None,
          threeway: bool = True, source: str | None = None, force: bool = False,
          progress: Progress = None, resume: bool = False) -> list[ApplyResult]:
    """Build every release of the named stacks (or those --release names): OUT/<stack> for the
    primary release, OUT/<stack>@<tag> for each further one. At a conflict, remembered resolutions
    (patches/<stack>/resolutions) are tried; without one the ConflictError says how to resolve and
    `--continue` (resume=True) finishes the stopped apply."""
    from .tree import build_tree

    results = []
    for s in project.targets(stacks, releases):
        where = out_dir(project, out)
        if resume:
            from . import resolve  # (and bump, whose resolutions it reuses): only off the plain path

            results.append(resolve.continue_apply(s, where, root=project.root, progress=progress, force=force).apply)
            compile_problems(s, results[-1])
            continue
        try:
            results.append(build_tree(s, where, threeway=threeway, source_kind=source, force=force, progress=progress))
        except ConflictError as e:
            failed = getattr(e.report, "failed_tree", None)
            if not failed or getattr(e.report, "kind", "") == "upstreamed":
                raise
            from . import resolve

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
    from . import resolve

    where = out_dir(project, out)
    return [t for t in targets if resolve.failed_tree(where, t.label).is_dir()]


def abort_apply(project: Project, stack: str, *, out: Path | None = None) -> Path:
    from . import resolve

    return resolve.abort_apply(project.target(stack), out_dir(project, out))


def ensure_tree(root: Path, stack: str, *, patched: bool = True, out: Path | None = None,
                release: str | None = None) -> Path:
    """The patched tree (or the pristine pin) of `stack` at `release` (default: the primary),
    built or reused under build/: build/vllm, build/vllm.base, build/vllm@v0.33.0(.base)."""
    from .tree import build_tree

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


def export(project: Project, stack: str, *, release: str | None = None, out: Path | None = None,
           tree: Path | None = None, check: bool = False, remove: tuple[str, ...] = (),
           force: bool = False) -> ExportResult:
    """Export one release's tree (default: the primary's) into its patch folder. A tree that is
    mid-am/rebase, partial, or of another stack or pin is refused; a patch file is deleted only
    when `remove` names it."""
    from .exporter import export_stack, exportable_problem
    from .locks import stack_lock

    cfg = project.target(stack, release)
    tree = tree or out_dir(project, out) / cfg.label
    if not tree.exists():
        raise Dsv4Error(f"{tree}: no patched tree",
                        hint=f"run `dsv4-patch apply {cfg.label}` and commit your edits there first")
    from .advice import export_refusal

    with stack_lock(cfg):
        why = exportable_problem(cfg, tree)
        if why:
            raise Dsv4Error(f"{tree}: refusing to export: {why}", hint="export writes the stack's patch files from a tree "
                            f"built by `dsv4-patch apply {cfg.label}` and edited there")
        refused = export_refusal(tree) if (tree / ".git").exists() else None
        if refused:
            raise Dsv4Error(refused[0], hint=refused[1])
        return export_stack(cfg, tree, check=check, remove=remove, force=force)


@dataclass
class ExportRun:
    """`export STACK` over its releases: each one exported, or skipped (no tree was built)."""
    config: StackConfig
    result: ExportResult | None
    skipped: str = ""

    def to_dict(self) -> dict:
        d = self.result.to_dict() if self.result else {"written": [], "removed": [], "series_changed": False,
                                                       "stale": False}
        return d | release_fields(self.config) | {"skipped": self.skipped,
                                                  "diff": self.result.diff if self.result else ""}


def export_releases(project: Project, stack: str, *, releases: list[str] | None = None, out: Path | None = None,
                    tree: Path | None = None, check: bool = False, remove: tuple[str, ...] = (),
                    force: bool = False) -> list[ExportRun]:
    """Export every release of `stack` whose tree exists (those named must exist).

    With --tree only one release can be meant: the one --release names, else the primary."""
    named = bool(releases) or "@" in stack
    cfgs = project.targets([stack], releases)
    if tree is not None:
        if len(cfgs) > 1 and named:
            raise UsageError("--tree names one tree: pass one --release with it")
        cfgs = cfgs[:1]
        return [ExportRun(cfgs[0], export(project, cfgs[0].label, tree=tree, check=check, remove=remove,
                                                   force=force))]
    runs = []
    for cfg in cfgs:
        path = out_dir(project, out) / cfg.label
        if not path.exists() and not named:
            runs.append(ExportRun(cfg, None, skipped=f"no tree {path} (run `dsv4-patch apply {cfg.label}`)"))
            continue
        runs.append(ExportRun(cfg, export(project, cfg.label, out=out, check=check,
                                          remove=tuple(n for n in remove if (cfg.patch_dir / n).exists()),
                                          force=force)))
    if all(r.result is None for r in runs):
        export(project, cfgs[0].label, out=out, check=check)  # raises: no tree of any release
    return runs


def export_upstream(project: Project, stack: str, *, releases: list[str] | None = None, out: Path | None = None,
                    mbox: Path | None = None, to_stdout: bool = False, signoff_as: str | None = None):
    """`export --upstream`: one mbox per release, from the committed patch files (no tree), each
    message signed off by the sender (`signoff_as`, else the user's git identity; see upstream_mbox).

    Written to OUT/upstream/<stack>.mbox and OUT/upstream/<stack>@<tag>.mbox, or to `mbox` (or
    returned for stdout) when one release is selected. Every release is computed before the first
    file is written: an error (no identity, a malformed patch) writes nothing.
    Returns (rows, mbox bytes for stdout)."""
    from .upstream_mbox import export_upstream as one
    from .upstream_mbox import signer_for, write_mbox

    cfgs = project.targets([stack], releases)
    if (mbox is not None or to_stdout) and len(cfgs) > 1:
        raise UsageError(f"{stack} has {len(cfgs)} releases ({', '.join(c.label for c in cfgs)}); --mbox names one file",
                         hint="pick one with --release TAG or STACK@TAG")
    signer = signer_for(project.root, signoff_as)
    if to_stdout:
        row, data = one(cfgs[0], None, signer)
        return [row], data
    done = []
    for cfg in cfgs:
        dest = mbox if mbox is not None else out_dir(project, out) / "upstream" / f"{cfg.label}.mbox"
        row, data = one(cfg, None, signer)
        row.mbox = str(dest)
        done.append((row, dest, data))
    for _, dest, data in done:
        write_mbox(dest, data)
    return [row for row, _, _ in done], None


def check(project: Project, stacks: list[str] | None = None, *, releases: list[str] | None = None) -> list[Finding]:
    """Lint findings of each release; the `.py` files a series touches are compiled as the series
    leaves them, read from the built tree's objects (build/<label>) or computed from a cached pin
    (never fetched: `check` needs no network)."""
    from .lint import lint_stack
    from .sources import Cache

    findings = []
    for s in project.targets(stacks, releases):
        def sources(s=s):
            base = _cached_base(s, Cache.default())
            return [out_dir(project, None) / s.label / ".git"], (base.git_dir, base.commit) if base else None

        for f in lint_stack(project, s, sources=sources):
            f.stack, f.release = s.name, s.release or ""
            findings.append(f)
    return findings


def compile_problems(cfg: StackConfig, result: ApplyResult) -> None:
    """Raise (exit 1) when a `.py` file the series touches does not compile in the tree apply just
    built or kept; the tree stays, for the fix. One line per file (the first in the message)."""
    from .compilecheck import check_work_tree, python_version, remember_tree, tree_known_good
    from .stack import load_stack

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


# ---------------------------------------------------------------- status
@dataclass
class StackStatus:
    name: str
    upstream: str
    tag: str | None
    commit: str
    sources: list[str]
    patches: list[dict]
    applies: dict | None = None  # --check: {"ok": bool, "failure": {...}}
    compiles: dict | None = None  # --check: {"ok": bool, "problems": [one line per .py file that does not compile]}
    semantic: list[dict] | None = None  # --check: each patch's intent tests on the pristine pin
    warnings: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    release: str | None = None
    primary: bool = True
    label: str = ""
    patch_dir: str = ""

    def to_dict(self) -> dict:
        return self.__dict__.copy()


DEEPGEMM_CMAKE = "cmake/external_projects/deepgemm.cmake"


def vllm_deepgemm_pin(base_repo: Path, commit: str) -> tuple[str | None, str | None]:
    """(repository, GIT_TAG) that vLLM's cmake builds DeepGEMM from, read from the base tree.

    The values sit in cmake variables (`set(_DEEPGEMM_UPSTREAM_TAG "e21c…")`, then
    `GIT_TAG "${_DEEPGEMM_UPSTREAM_TAG}"`), so simple `set()` assignments are substituted."""
    from .gitcmd import Git

    r = Git(base_repo).run("show", f"{commit}:{DEEPGEMM_CMAKE}", check=False)
    if r.rc != 0:
        return None, None
    sets = dict(re.findall(r'set\(\s*(\w+)\s+"?([^")\s]+)"?\s*\)', r.out))

    def value(key: str) -> str | None:
        m = re.search(rf"{key}\s+\"?([^\"\s)]+)\"?", r.out)
        if not m:
            return None
        return re.sub(r"\$\{(\w+)\}", lambda v: sets.get(v.group(1), v.group(0)), m.group(1))

    return value("GIT_REPOSITORY"), value("GIT_TAG")


def status(project: Project, stacks: list[str] | None = None, *, releases: list[str] | None = None,
           check_apply: bool = False, semantic: bool = True, cache: Cache | None = None,
           progress: Progress = None) -> list[StackStatus]:
    """One row per release of each stack (the primary first); with `check_apply`, whether it applies
    and (`semantic`) whether each patch's intent tests fail on the pristine pin."""
    from .sources import Cache
    from .stack import load_stack
    from .errors import PatchFailure
    from .tree import applies_on, build_tree

    cache = cache or Cache.default()
    rows = []
    for cfg in project.targets(stacks, releases):
        loaded = load_stack(cfg)
        row = StackStatus(cfg.name, cfg.upstream, cfg.tag, cfg.commit, [s.describe() for s in cfg.sources],
                          [{"name": p.name, "subject": p.subject, **p.metadata.to_dict()} for p in loaded.patches],
                          release=cfg.release, primary=cfg.primary, label=cfg.label,
                          patch_dir=project.rel(cfg.patch_dir))
        if check_apply:
            with tempfile.TemporaryDirectory(prefix="dsv4-status-") as td:
                try:
                    # With intent tests: the pristine pin (they run on it), then the patches on its
                    # objects; a patched tree only where that cannot tell (git am decides, and reports).
                    # Without: the patched tree, the one tree either way.
                    base = build_tree(cfg, Path(td), name=cfg.name + BASE_SUFFIX, upto=0, cache=cache,
                                      progress=progress) if semantic else None
                    if base is None or not applies_on(cfg, base.tree):
                        build_tree(cfg, Path(td), cache=cache, progress=progress)
                    row.applies = {"ok": True}
                    _compiles(project, cfg, loaded.patches, Path(td), base, row)
                    if base is not None:
                        _semantic_at_pin(project, cfg, loaded.patches, base.tree, row, progress)
                except ConflictError as e:
                    # the failed tree was in this temporary folder, gone on return (`apply` keeps one to resolve in)
                    failure = {**e.report.to_dict(), "failed_tree": None} if isinstance(e.report, PatchFailure) else e.message
                    row.applies = {"ok": False, "failure": failure}
                except Dsv4Error as e:  # not a verdict on the patches: the check could not be made
                    row.applies = {"ok": False, "failure": e.one_line(), "unchecked": True}
        rows.append(row)
    _cross_stack(project, rows, cache, fetch=check_apply)
    return rows


def _compiles(project: Project, cfg: StackConfig, patches, td: Path, base, row: StackStatus) -> None:
    """status --check: the touched `.py` files as the series leaves them must compile (read from
    the objects the check just made; named where `apply` puts the tree)."""
    from .compilecheck import check_objects, python_version

    repos = [td / cfg.label / ".git"] + ([base.tree / ".git"] if base is not None else [])
    pin = (repos[0], "refs/dsv4/base") if repos[0].exists() else (repos[-1], "HEAD")
    problems, _ = check_objects(patches, repos, pin)
    tree = project.rel(out_dir(project, None) / cfg.label)
    row.compiles = {"ok": not problems, "python": python_version(),
                    "problems": [pr.one_line(tree) for pr in problems]}


def _semantic_at_pin(project: Project, cfg: StackConfig, patches, pristine: Path, row: StackStatus,
                     progress: Progress) -> None:
    """Each patch's intent tests on the pristine pin: they must fail there (`needed`); one that passes
    without its patch proves nothing (or the pin already has the fix)."""
    from .bump.semantic import check as semantic_check, intent_tests
    from .pristine import outcome

    # the release's own variables (DSV4_RELEASE_<STACK>, DSV4_TREE_<STACK>__<TAG>): a further release's tests
    # asking for it by tag get the pristine pin, not a tree they would build
    row.semantic = [s.to_dict() for s in semantic_check(project.root, cfg, pristine, patches, progress=progress)]
    by_name = {p.name: p for p in patches}
    for s in row.semantic:
        if s["verdict"] == "fixed-upstream":
            row.warnings.append(f"{s['patch']}: its intent tests pass on the pristine pin without it ({s['reason']})")
        # one intent test that passes without the patch is no evidence, whatever the others say (pristine.py)
        nodes, _ = intent_tests(by_name[s["patch"]]) if s["patch"] in by_name else ([], "")
        s["passes_on_pristine"] = [n for n in nodes if outcome(n, s["tests"]) == "passed"]


def _cross_stack(project: Project, rows: list[StackStatus], cache: Cache, *, fetch: bool) -> None:
    """vLLM builds the DeepGEMM its cmake pins: report that beside the deepgemm stack's pin."""
    from .sources import materialize

    if "vllm" not in project.stacks or "deepgemm" not in project.stacks:
        return
    row = next((r for r in rows if r.name in ("vllm", "deepgemm") and r.primary), None)
    if row is None:
        return
    vllm = project.stack("vllm")
    try:
        base = materialize(vllm, cache) if fetch else _cached_base(vllm, cache)
    except Dsv4Error:
        base = None
    if base is None:
        row.info["vllm_deepgemm_pin"] = "unknown (run `dsv4-patch apply vllm` or `status --check` to read it)"
        return
    repo, tag = vllm_deepgemm_pin(base.git_dir, base.commit)
    pin = project.stack("deepgemm").commit
    row.info["vllm_deepgemm_pin"] = f"{repo} @ {tag}"
    row.info["deepgemm_stack_pin"] = f"{project.stack('deepgemm').upstream} @ {pin}"
    if tag and not (pin.startswith(tag.lower()) or tag.lower().startswith(pin)):
        row.warnings.append(
            f"vLLM {vllm.tag or vllm.commit} builds DeepGEMM {tag} ({repo}), but the deepgemm stack is pinned to "
            f"{pin[:12]}: a vLLM build uses the patched DeepGEMM only through DEEPGEMM_SRC_DIR")


def _cached_base(cfg: StackConfig, cache: Cache):
    """The stack's base if a source already has it locally (no network)."""
    from .sources import materialize

    try:
        return materialize(cfg, cache, offline=True)
    except Dsv4Error:
        return None


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
    from . import upstream_ci as uci
    from .regress import RegressReport
    from .stack import load_stack
    from .tree import build_tree

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


# ---------------------------------------------------------------- pin
def pin(project: Project, stack: str, ref: str, *, release: str | None = None, source: str | None = None,
        cache: Cache | None = None, progress: Progress = None, dry_run: bool = False, check_applies: bool = True,
        force: bool = False) -> PinResult:
    """Move the pin of the stack's primary release (or of `release`) to `ref` through the same
    verification as apply. First checks that every patch still applies there (result on
    `.applies`); a pin the stack would not apply at is refused (ConflictError naming the patches)
    unless `force`, and only reported with dry_run."""
    from .locks import stack_lock
    from .pincheck import check_pin
    from .pinning import pin_stack
    from .sources import Cache

    cfg = project.target(stack, release)
    verdict = None
    if check_applies and not cfg.primary:  # bump rebases a stack's primary series
        from .pincheck import PinCheck

        verdict = PinCheck(ref, False, why_unchecked=f"`bump` checks the primary series; for {cfg.label} run "
                                                     f"`dsv4-patch apply {cfg.label}` after the pin moves")
    elif check_applies:
        verdict = check_pin(project, cfg.name, ref, source=source, progress=progress)
        if verdict.checked and not verdict.ok and not (dry_run or force):
            raise ConflictError(f"{cfg.label}: pin not moved to {ref}: {verdict.summary()}",
                                hint=f"`dsv4-patch bump {cfg.label} {ref}` rebases and refreshes the patches; "
                                     "--force moves the pin anyway")
    with stack_lock(cfg):  # export, apply, bump and pin of one stack: one at a time
        res = pin_stack(project, cfg, ref, source=source, cache=cache or Cache.default(),
                        progress=progress, dry_run=dry_run)
    res.applies = verdict
    return res


def build(project: Project, stack: str, venv: Path, *, release: str | None = None, from_source: bool = False,
          out: Path | None = None, deepgemm_src: Path | None = None, progress: Progress = None):
    """Python overlay build of the patched stack (one release, default the primary) into `venv`
    (see dsv4_patch/build.py)."""
    from . import build as build_mod
    from .tree import build_tree

    cfg = project.target(stack, release)
    base_out = out_dir(project, out)
    patched = build_tree(cfg, base_out, progress=progress)
    base = build_tree(cfg, base_out, name=cfg.label + BASE_SUFFIX, upto=0, force=True, progress=progress)
    pkg = next((s for s in cfg.sources if s.kind in ("sdist", "wheel")), None)
    if pkg is None:
        raise UsageError(f"stack {stack} has no PyPI release source", hint="overlay builds need an sdist or wheel pin")
    return build_mod.build_overlay(base.tree, patched.tree, venv, package=pkg.get("package"), version=str(pkg.get("version")),
                                   from_source=from_source, deepgemm_src=deepgemm_src, progress=progress)


def clean(project: Project, out: Path | None = None) -> Path:
    d = out_dir(project, out)
    if d.exists():
        shutil.rmtree(d)
    return d


# ---------------------------------------------------------------- recording verification levels
def record_levels(project: Project, report: RegressReport, levels: list[str], hardware: str,
                  *, out: Path | None = None, by: str = "dsv4-patch regress --record") -> list[Path]:
    """Write one result file per (stack, level) for `status --matrix`, from a regress run.

    A test level is recorded as failed when a bound test failed (or is missing); otherwise as
    passed for exactly the patches whose bound tests all passed. A patch whose tests skipped has
    not been verified: it is left out of the passed record and named, with the skip reason, in its
    note (a level where nothing ran writes no file). `apply` is passed when the tree exports
    byte-identical to the patch files."""
    from .e2e.record import LEVELS, make_result, write_result
    from .e2e.testcode import fingerprint, files_of_tests

    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise UsageError(f"unknown level {bad[0]!r}", hint=f"use {', '.join(LEVELS)}")
    written = []
    for label in sorted({r.stack for r in report.results}):
        cfg = project.target(label)  # results name a release by label: vllm, vllm@v0.33.0
        # A patch none of whose bound tests ran here (all left out by -m, e.g. -m gpu) is not part
        # of this result: the file names only the patches whose tests ran.
        rows = [r for r in report.results if r.stack == label and r.outcome != "no-tests"]
        if not rows:
            continue
        failed = [r for r in rows if r.outcome in ("failed", "missing")]
        pristine, pristine_why = (_pristine_block(project, cfg, rows, out) if any(lv != "apply" for lv in levels)
                                  else (None, ""))
        verified = [r.patch for r in rows if r.outcome == "passed"]
        unverified = {r.patch: f"{r.outcome}: {r.reason or 'bound tests skipped'}"
                      for r in rows if r.outcome in ("not-verified", "partial")}
        for level in levels:
            ok, evidence = not failed, {"patches": {r.patch: r.outcome for r in rows},
                                        "pytest_rc": report.pytest_rc, "seconds": round(report.seconds, 1)}
            note, keep = "", None
            if level == "apply":
                exp = export(project, label, out=out, check=True)
                ok, evidence = not exp.stale, {"export_stale": exp.stale, "applied_patches": len(rows)}
            elif ok:
                # A pass speaks only for the patches whose tests ran; the others are named as not verified.
                if not verified:
                    continue
                keep = set(verified)
                if unverified:
                    evidence["not_verified"] = unverified
                    note = "not verified here: " + "; ".join(f"{p} ({why})" for p, why in unverified.items())
            state = (out_dir(project, out) / cfg.label / ".git" / "dsv4" / "state.json")
            base = json.loads(state.read_text())["base"] if state.exists() else ""
            tests = None
            if level != "apply":  # the test code this result speaks for: status --matrix flags it once edited
                tests = fingerprint(project.root, files_of_tests(project.root, [n for r in rows for n in r.tests]))
            if level != "apply" and pristine_why:
                note = "; ".join(filter(None, [note, pristine_why]))
            data = make_result(cfg.name, cfg.patch_dir, level, hardware, ok, evidence, upstream_commit=base, by=by,
                               note=note, tests=tests)
            if level != "apply" and pristine is not None:
                data["pristine"] = pristine  # each bound id's outcome without the patch: what `check` reads
            keep = keep if keep is not None else {r.patch for r in rows}  # only the patches whose tests ran
            data["patches"] = [p for p in data["patches"] if p["name"] in keep]
            written.append(write_result(cfg.patch_dir, data))
    return written


def _pristine_block(project: Project, cfg: StackConfig, rows, out: Path | None) -> tuple[dict | None, str]:
    """(the `pristine` block of the result files, why there is none): the bound ids that ran on the
    patched tree, run once more on the pristine pin standing in for it (pristine.py)."""
    from . import pristine
    from .bump.semantic import run_on_pristine
    from .stack import load_stack
    from .tree import build_tree

    patches = [p for p in load_stack(cfg).patches if p.name in {r.patch for r in rows}]
    ran = {n for r in rows for n, o in r.tests.items() if o != "deselected"}
    ran &= {n for p in patches for n in p.metadata.regression_tests}  # upstream-ci rows name checks, not ids
    if not ran:
        return None, ""
    try:
        base = build_tree(cfg, out_dir(project, out), name=cfg.label + BASE_SUFFIX, upto=0, force=True)
        results = run_on_pristine(project.root, cfg, base.tree, sorted(ran))
    except Dsv4Error as e:
        return None, f"pristine outcomes not recorded: {e.one_line()}"
    return pristine.block(project.root, cfg.commit, patches, results, ran), ""
