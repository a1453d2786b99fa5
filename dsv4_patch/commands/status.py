"""`status`: each stack's pin, patches and trailers; `--check` re-verifies at the pin."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Project, StackConfig
from ..errors import ConflictError, Dsv4Error
from ..outdir import BASE_SUFFIX, out_dir
from ._shared import cached_base

if TYPE_CHECKING:
    from ..sources import Cache, Progress


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
    from ..gitcmd import Git

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
    from ..sources import Cache
    from ..stack import load_stack
    from ..errors import PatchFailure
    from ..tree import applies_on, build_tree

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
    from ..compilecheck import check_objects, python_version

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
    from ..bump.semantic import check as semantic_check, intent_tests
    from ..pristine import outcome

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
    from ..sources import materialize

    if "vllm" not in project.stacks or "deepgemm" not in project.stacks:
        return
    row = next((r for r in rows if r.name in ("vllm", "deepgemm") and r.primary), None)
    if row is None:
        return
    vllm = project.stack("vllm")
    try:
        base = materialize(vllm, cache) if fetch else cached_base(vllm, cache)
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
