"""The commands layer: one function per CLI command. Returns data; never prints.

cli (tools/applypatch.py) -> api -> domain (config, stack, tree, exporter, lint, regress)
-> adapters (gitcmd, sources).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .config import Project, StackConfig, load_project
from .errors import ConflictError, Dsv4Error, UsageError
from .gitcmd import Git
from .lint import Finding, lint_stack
from .regress import RegressReport, bound_tests, missing_modules, require_pytest, run_pytest, summarize, tree_env
from .sources import Cache, Progress, materialize
from .stack import load_stack
from .tree import ApplyResult, PatchFailure, build_tree
from .exporter import ExportResult, export_stack
from .pinning import PinResult, pin_stack

DEFAULT_OUT = "build"
BASE_SUFFIX = ".base"


def out_dir(project: Project, out: Path | None) -> Path:
    return Path(out) if out else project.root / DEFAULT_OUT


# ---------------------------------------------------------------- apply / export / check
def apply(project: Project, stacks: list[str] | None, *, out: Path | None = None, threeway: bool = True,
          source: str | None = None, force: bool = False, progress: Progress = None,
          resume: bool = False) -> list[ApplyResult]:
    """Build each stack's tree. At a conflict, remembered resolutions (patches/<stack>/resolutions)
    are tried; without one the ConflictError says how to resolve and `--continue` (resume=True)."""
    from . import resolve

    results = []
    for s in project.select(stacks):
        where = out_dir(project, out)
        if resume:
            results.append(resolve.continue_apply(s, where, root=project.root, progress=progress).apply)
            continue
        try:
            results.append(build_tree(s, where, threeway=threeway, source_kind=source, force=force, progress=progress))
        except ConflictError as e:
            failed = getattr(e.report, "failed_tree", None)
            if not failed or getattr(e.report, "kind", "") == "upstreamed":
                raise
            reused = resolve.reuse_after_conflict(s, where, Path(failed), root=project.root, progress=progress)
            if reused is not None:
                results.append(reused.apply)
                continue
            resolve.prepare_failed_tree(s, where, Path(failed))
            e.hint = resolve.next_step_hint(s.name, failed)
            raise
    return results


def abort_apply(project: Project, stack: str, *, out: Path | None = None) -> Path:
    from . import resolve

    return resolve.abort_apply(project.stack(stack), out_dir(project, out))


def ensure_tree(root: Path, stack: str, *, patched: bool = True, out: Path | None = None) -> Path:
    """The patched tree (or the pristine pin) of `stack`, built or reused under build/."""
    project = load_project(root)
    cfg = project.stack(stack)
    name = stack if patched else stack + BASE_SUFFIX
    res = build_tree(cfg, out_dir(project, out), name=name, upto=None if patched else 0, force=not patched)
    return res.tree


def export(project: Project, stack: str, *, out: Path | None = None, tree: Path | None = None,
           check: bool = False) -> ExportResult:
    cfg = project.stack(stack)
    tree = tree or out_dir(project, out) / stack
    if not tree.exists():
        raise Dsv4Error(f"{tree}: no patched tree", hint=f"run `dsv4-patch apply {stack}` and commit your edits there first")
    from .advice import export_refusal

    refused = export_refusal(tree) if (tree / ".git").exists() else None
    if refused:
        raise Dsv4Error(refused[0], hint=refused[1])
    return export_stack(cfg, tree, check=check)


def check(project: Project, stacks: list[str] | None = None) -> list[Finding]:
    findings = []
    for s in project.select(stacks):
        findings += lint_stack(project, s)
    return findings


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
    warnings: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return self.__dict__.copy()


DEEPGEMM_CMAKE = "cmake/external_projects/deepgemm.cmake"


def vllm_deepgemm_pin(base_repo: Path, commit: str) -> tuple[str | None, str | None]:
    """(repository, GIT_TAG) that vLLM's cmake builds DeepGEMM from, read from the base tree.

    The values sit in cmake variables (`set(_DEEPGEMM_UPSTREAM_TAG "e21c…")`, then
    `GIT_TAG "${_DEEPGEMM_UPSTREAM_TAG}"`), so simple `set()` assignments are substituted."""
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


def status(project: Project, stacks: list[str] | None = None, *, check_apply: bool = False,
           cache: Cache | None = None, progress: Progress = None) -> list[StackStatus]:
    cache = cache or Cache.default()
    rows = []
    for cfg in project.select(stacks):
        loaded = load_stack(cfg)
        row = StackStatus(cfg.name, cfg.upstream, cfg.tag, cfg.commit, [s.describe() for s in cfg.sources],
                          [{"name": p.name, "subject": p.subject, **p.metadata.to_dict()} for p in loaded.patches])
        if check_apply:
            with tempfile.TemporaryDirectory(prefix="dsv4-status-") as td:
                try:
                    build_tree(cfg, Path(td), cache=cache, progress=progress)
                    row.applies = {"ok": True}
                except ConflictError as e:
                    row.applies = {"ok": False, "failure": e.report.to_dict() if isinstance(e.report, PatchFailure) else e.message}
                except Dsv4Error as e:
                    row.applies = {"ok": False, "failure": e.one_line()}
        rows.append(row)
    _cross_stack(project, rows, cache, fetch=check_apply)
    return rows


def _cross_stack(project: Project, rows: list[StackStatus], cache: Cache, *, fetch: bool) -> None:
    """vLLM builds the DeepGEMM its cmake pins: report that beside the deepgemm stack's pin."""
    if "vllm" not in project.stacks or "deepgemm" not in project.stacks:
        return
    row = next((r for r in rows if r.name in ("vllm", "deepgemm")), None)
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
    try:
        return materialize(cfg, cache, offline=True)
    except Dsv4Error:
        return None


# ---------------------------------------------------------------- regress
def regress(project: Project, stacks: list[str] | None = None, *, out: Path | None = None, bisect: bool = False,
            marker: str | None = None, pytest_args: tuple[str, ...] = (), log=None,
            progress: Progress = None) -> RegressReport:
    t0 = time.monotonic()
    cfgs = project.select(stacks)
    require_pytest()
    base_out = out_dir(project, out)
    if bisect:
        return _bisect(project, cfgs, base_out, marker, pytest_args, log, progress, t0)
    trees, stack_patches = {}, []
    for cfg in cfgs:
        patched = build_tree(cfg, base_out, progress=progress)
        base = build_tree(cfg, base_out, name=cfg.name + BASE_SUFFIX, upto=0, force=True, progress=progress)
        trees[cfg.name] = (patched.tree, base.tree)
        stack_patches.append((cfg.name, load_stack(cfg).patches))
    nodes = bound_tests([p for _, ps in stack_patches for p in ps])
    if not nodes:
        return RegressReport([], time.monotonic() - t0, 0)
    say_ = progress or (lambda m: None)
    say_(f"running {len(nodes)} bound test ids")
    rc, outcomes = run_pytest(project.root, nodes, tree_env(trees), marker=marker, pytest_args=pytest_args, log=log)
    return RegressReport(summarize(stack_patches, outcomes), time.monotonic() - t0, rc,
                         missing_modules=missing_modules(outcomes))


def _bisect(project, cfgs, base_out, marker, pytest_args, log, progress, t0) -> RegressReport:
    """Apply each stack one patch at a time; name the first patch whose bound tests fail."""
    results = []
    rc = 0
    for cfg in cfgs:
        patches = load_stack(cfg).patches
        base = build_tree(cfg, base_out, name=cfg.name + BASE_SUFFIX, upto=0, force=True, progress=progress)
        for k in range(1, len(patches) + 1):
            tree = build_tree(cfg, base_out, name=cfg.name + ".bisect", upto=k, force=True, progress=progress)
            nodes = bound_tests(patches[:k])
            if progress:
                progress(f"bisect {cfg.name}: {k}/{len(patches)} {patches[k - 1].name}")
            rc, outcomes = run_pytest(project.root, nodes, tree_env({cfg.name: (tree.tree, base.tree)}),
                                      marker=marker, pytest_args=pytest_args, log=log) if nodes else (0, {})
            step = summarize([(cfg.name, patches[:k])], outcomes)
            if any(r.outcome in ("failed", "missing") for r in step):
                return RegressReport(step, time.monotonic() - t0, rc, first_bad=(cfg.name, patches[k - 1].name),
                                     missing_modules=missing_modules(outcomes))
            results = [r for r in results if r.stack != cfg.name] + step
    return RegressReport(results, time.monotonic() - t0, rc)


# ---------------------------------------------------------------- pin
def pin(project: Project, stack: str, ref: str, *, source: str | None = None, cache: Cache | None = None,
        progress: Progress = None, dry_run: bool = False, check_applies: bool = True,
        force: bool = False) -> PinResult:
    """Move the stack's pin to `ref` through the same verification as apply. First checks that
    every patch still applies there (result on `.applies`); a pin the stack would not apply at is
    refused (ConflictError naming the patches) unless `force`, and only reported with dry_run."""
    from .pincheck import check_pin

    verdict = None
    if check_applies:
        verdict = check_pin(project, stack, ref, source=source, progress=progress)
        if verdict.checked and not verdict.ok and not (dry_run or force):
            raise ConflictError(f"{stack}: pin not moved to {ref}: {verdict.summary()}",
                                hint=f"`dsv4-patch bump {stack} {ref}` rebases and refreshes the patches; "
                                     "--force moves the pin anyway")
    res = pin_stack(project, project.stack(stack), ref, source=source, cache=cache or Cache.default(),
                    progress=progress, dry_run=dry_run)
    res.applies = verdict
    return res


def build(project: Project, stack: str, venv: Path, *, from_source: bool = False, out: Path | None = None,
          deepgemm_src: Path | None = None, progress: Progress = None):
    """Python overlay build of the patched stack into `venv` (see dsv4_patch/build.py)."""
    from . import build as build_mod

    cfg = project.stack(stack)
    base_out = out_dir(project, out)
    patched = build_tree(cfg, base_out, progress=progress)
    base = build_tree(cfg, base_out, name=cfg.name + BASE_SUFFIX, upto=0, force=True, progress=progress)
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

    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise UsageError(f"unknown level {bad[0]!r}", hint=f"use {', '.join(LEVELS)}")
    written = []
    for stack in sorted({r.stack for r in report.results}):
        cfg = project.stack(stack)
        rows = [r for r in report.results if r.stack == stack]
        failed = [r for r in rows if r.outcome in ("failed", "missing")]
        verified = [r.patch for r in rows if r.outcome == "passed"]
        unverified = {r.patch: f"{r.outcome}: {r.reason or 'bound tests skipped'}"
                      for r in rows if r.outcome in ("not-verified", "partial", "no-tests")}
        for level in levels:
            ok, evidence = not failed, {"patches": {r.patch: r.outcome for r in rows},
                                        "pytest_rc": report.pytest_rc, "seconds": round(report.seconds, 1)}
            note, keep = "", None
            if level == "apply":
                exp = export(project, stack, out=out, check=True)
                ok, evidence = not exp.stale, {"export_stale": exp.stale, "applied_patches": len(rows)}
            elif ok:
                # A pass speaks only for the patches whose tests ran; the others are named as not verified.
                if not verified:
                    continue
                keep = set(verified)
                if unverified:
                    evidence["not_verified"] = unverified
                    note = "not verified here: " + "; ".join(f"{p} ({why})" for p, why in unverified.items())
            state = (out_dir(project, out) / stack / ".git" / "dsv4" / "state.json")
            base = json.loads(state.read_text())["base"] if state.exists() else ""
            data = make_result(stack, cfg.patch_dir, level, hardware, ok, evidence, upstream_commit=base, by=by,
                               note=note)
            if keep is not None:
                data["patches"] = [p for p in data["patches"] if p["name"] in keep]
            written.append(write_result(cfg.patch_dir, data))
    return written
