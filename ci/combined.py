"""Combined-stack check: the PR's patches on top of the target branch's.

Two pull requests can each be green and still conflict once both land. Given two refs of this
repository (BASE: the target branch, HEAD: the PR), for every stack:

    changed = patches whose bytes differ between merge-base(BASE, HEAD) and HEAD (new or edited)
    removed = patches in merge-base's series that HEAD's series no longer lists
    combined series = BASE's series, with edited patches taking HEAD's bytes in place, removed
                      ones left out, new ones appended in HEAD's order

The combined stack is written into a scratch project (stacks.toml from BASE, or HEAD's where the
PR changed it) and built with the engine, exactly like `dsv4-patch apply`.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dsv4_patch.config import load_project
from dsv4_patch.errors import ConflictError, Dsv4Error, SourceError
from dsv4_patch.patchfile import load_patch
from dsv4_patch.series import render_series
from dsv4_patch.tree import build_tree


def _git(repo: Path, *args: str, check: bool = True) -> bytes:
    p = subprocess.run(["git", *args], cwd=repo, capture_output=True)
    if check and p.returncode != 0:
        raise Dsv4Error(f"git {' '.join(args)}: {p.stderr.decode().strip()}")
    return p.stdout if p.returncode == 0 else b""


def show(repo: Path, ref: str, path: str) -> bytes | None:
    p = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=repo, capture_output=True)
    return p.stdout if p.returncode == 0 else None


def series_at(repo: Path, ref: str, stack_dir: str) -> list[str]:
    text = show(repo, ref, f"{stack_dir}/series")
    if text is None:
        return []
    return [ln.split("#", 1)[0].strip() for ln in text.decode().splitlines() if ln.split("#", 1)[0].strip()]


@dataclass
class Combined:
    stack: str
    series: list[str]
    changed: list[str] = field(default_factory=list)  # from the PR
    removed: list[str] = field(default_factory=list)
    ok: bool = True
    failure: dict | None = None  # PatchFailure.to_dict()
    message: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def combine(repo: Path, base: str, head: str, stack_dir: str) -> tuple[list[tuple[str, bytes]], list[str], list[str]]:
    mb = _git(repo, "merge-base", base, head).decode().strip()
    fork, pr, target = series_at(repo, mb, stack_dir), series_at(repo, head, stack_dir), series_at(repo, base, stack_dir)
    changed = [n for n in pr if show(repo, head, f"{stack_dir}/{n}") != show(repo, mb, f"{stack_dir}/{n}")]
    removed = [n for n in fork if n not in pr]
    out = []
    for n in target:
        if n in removed:
            continue
        src = head if n in changed else base
        out.append((n, show(repo, src, f"{stack_dir}/{n}")))
    have = {n for n, _ in out}
    out += [(n, show(repo, head, f"{stack_dir}/{n}")) for n in pr if n in changed and n not in have]
    return out, changed, removed


def _with_lines(cfg, report) -> dict | None:
    """The failure, each hunk with its line in the combined patch file (for annotations: the
    PR's file may not exist in the checkout the check runs from)."""
    if report is None:
        return None
    d = report.to_dict()
    try:
        p = load_patch(cfg.patch_dir / report.patch)
    except Dsv4Error:
        return d
    lines = {h.header: h.line for fd in p.files for h in fd.hunks}
    for h in d["hunks"]:
        h["line"] = lines.get(h["header"], 1)
    return d


def check_combined(repo: Path, base: str, head: str, *, stacks: list[str] | None = None,
                   releases: list[str] | None = None, cache=None, progress=None) -> list[Combined]:
    """Every release of each stack (its own series folder), or those `releases` names."""
    repo = Path(repo).resolve()
    mb = _git(repo, "merge-base", base, head).decode().strip()
    toml_path = "patches/stacks.toml"
    pr_toml = show(repo, head, toml_path)
    toml = pr_toml if pr_toml != show(repo, mb, toml_path) else show(repo, base, toml_path)
    results = []
    with tempfile.TemporaryDirectory(prefix="dsv4-combined-") as td:
        proj = Path(td) / "proj"
        (proj / "patches").mkdir(parents=True)
        (proj / toml_path).write_bytes(toml)
        project = load_project(proj)
        for cfg in project.targets(stacks, releases):
            stack_dir = str(cfg.patch_dir.relative_to(proj))
            patches, changed, removed = combine(repo, base, head, stack_dir)
            cfg.patch_dir.mkdir(parents=True, exist_ok=True)
            for n, data in patches:
                (cfg.patch_dir / n).write_bytes(data)
            cfg.series_path.write_text(render_series([n for n, _ in patches]))
            res = Combined(cfg.label, [n for n, _ in patches], changed, removed)
            if not changed and not removed:
                res.message = "the PR does not touch this stack"
                results.append(res)
                continue
            try:
                build_tree(cfg, Path(td) / "out", cache=cache, progress=progress)
                res.message = f"{len(patches)} patches apply together"
            except ConflictError as e:
                res.ok, res.failure, res.message = False, _with_lines(cfg, e.report), e.message
            except SourceError as e:
                res.message = f"unavailable: {e.one_line()}"
            results.append(res)
    return results
