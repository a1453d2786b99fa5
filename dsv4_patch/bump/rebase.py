"""`bump STACK REF`: rebase the stack from its pin onto REF, one verdict per patch.

    OUT/<stack>.bump                 the rebased tree (refs/dsv4/base = REF, one commit per patch
                                     that applied); `dsv4-patch export` conventions hold there
    OUT/<stack>.bump-conflicts/<p>   one tree per blocking patch <p>, left mid-`git am --3way`
                                     with conflict markers: resolve there, then --record-resolution;
                                     a tree holding work survives the next round (conflicts.py)
    OUT/<stack>.bump-upstream        the pristine REF, where each patch's intent tests ran (semantic.py)
    OUT/<stack>.bump-report.{md,json}

Each patch gets a textual verdict (classify.py) and a semantic one (semantic.py: do its intent
tests pass on the pristine REF without it?). A patch whose intent tests pass there is
`fixed-upstream` whatever its textual verdict, and is treated like an upstreamed one. A partial
REF (a `[[stacks.X.targets]]` entry with `partial`) is classified on the files it carries only
and is never exported from or pinned to.

Nothing in patches/ or stacks.toml changes unless every patch found a place (or an upstreamed
patch is dropped with --drop-upstreamed): then the patch files are re-exported from the rebased
tree (new context, same change) and the pin moves to REF; with `into`, the refreshed files go
to that folder instead and the pin is left alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Project, StackConfig, load_project
from ..errors import EXIT_CONFLICT, EXIT_OK, EXIT_UNVERIFIED, Dsv4Error, SourceError, UsageError
from ..exporter import export_stack, render_patches, strip_trailer
from ..gitcmd import Git, clone_local
from ..locks import stack_lock
from ..outdir import OutDir
from ..patchfile import PatchFile, parse_patch_bytes
from ..pinning import set_keys
from ..regress import SEED_ENV, RegressReport, bound_tests, one_test_run, release_tree_env, run_pytest, summarize
from ..regress_releases import regress
from ..series import render_series, series_header
from ..sources import Cache, Progress, materialize
from ..sources.base import say
from ..stack import load_stack
from ..tree import BASE_REF, build_tree, with_trailer
from . import conflicts, evidence, resolutions, targets
from .classify import Index, Outcome, classify, inside_part, touched
from .port_advice import advice  # a carried release's port; messages naming the old release
from .semantic import Semantic, check as semantic_check, pristine_checkout, release_port
from .repo import add_alternates, scratch

CONFLICT_META = conflicts.META


@dataclass
class BumpOptions:
    stop_on_conflict: bool = False
    regress: bool = True
    into: Path | None = None  # write refreshed patches here; patches/<stack> and the pin stay
    drop_upstreamed: bool = False
    source: str | None = None
    out: Path | None = None
    semantic: bool = True  # run each patch's intent tests on the pristine REF
    conflict_trees: bool = True  # leave a tree per blocking patch to resolve (pin's check needs none)
    force: bool = False  # delete conflict trees that hold unrecorded work (conflicts.py)


@dataclass
class BumpReport:
    stack: str
    old: dict  # {"label", "commit", "source"}
    new: dict
    outcomes: list[Outcome]
    tree: str
    status: str = "ok"  # ok | conflicts | partial | upstreamed (textually or fixed-upstream) | current | carried
    # patch -> why it is not verified (evidence.py); a textually ok bump with any is `unverified`
    unverified: dict[str, list[str]] = field(default_factory=dict)
    refreshed: list[str] = field(default_factory=list)
    written_to: str | None = None
    pin: dict = field(default_factory=dict)
    range_diff: str = ""
    regress: dict | None = None
    conflict_trees: dict[str, str] = field(default_factory=dict)
    trees: dict = field(default_factory=dict)  # conflicts.Trees.to_dict(): kept work, blocked-before, left
    seed: str | None = None  # DSV4_SEED of the tests it ran: re-runs their randomized checks
    hints: list[str] = field(default_factory=list)  # one-line advice: a carried release's port, stale messages
    semantic: list[Semantic] | None = None  # None: not run (--no-semantic)
    seconds: float = 0.0

    @property
    def result(self) -> str:
        """The bump's one-word outcome: `status`, except that a textually ok bump whose patches are
        not all verified (evidence.py) is `unverified`, and one whose regression tests failed `failed`."""
        if self.status != "ok":
            return self.status
        if self.regress and not self.regress.get("ok", False):
            return "failed"
        return "unverified" if self.unverified else "ok"

    @property
    def exit_code(self) -> int:
        return {"ok": EXIT_OK, "current": EXIT_OK, "carried": EXIT_OK, "failed": 1, "unverified": EXIT_UNVERIFIED}.get(self.result,
                                                                                                  EXIT_CONFLICT)

    def verdict(self, patch: str) -> Semantic | None:
        return next((s for s in self.semantic or [] if s.patch == patch), None)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("outcomes", "semantic")}
        d["patches"] = []
        for o in self.outcomes:
            sem = self.verdict(o.patch)
            d["patches"].append({**o.to_dict(), "semantic": sem.to_dict() if sem else None})
        d["result"] = self.result
        d["exit_code"] = self.exit_code
        d["seconds"] = round(self.seconds, 2)
        return d


def _out(project: Project, out: Path | None) -> Path:
    return Path(out) if out else project.root / "build"


def _am(g: Git, raw: bytes, threeway: bool) -> bool:
    """`git am` one mbox (keeping author, date, subject); on failure the tree is restored."""
    args = ["am", "--keep-cr", "-k", "--no-signoff", "--quiet", "--whitespace=nowarn"] + (["--3way"] if threeway else [])
    r = g.run(*args, check=False, stdin=raw)
    if r.rc != 0:
        g.run("am", "--abort", check=False)
        return False
    return True


def _resolution_mbox(stored: PatchFile, patch: PatchFile) -> bytes:
    return with_trailer(dataclasses.replace(stored, name=patch.name))


def _reuse_resolution(g: Git, cfg: StackConfig, p: PatchFile, k: str) -> str | None:
    """Apply a remembered resolution: the one recorded for exactly this pre-image, else one recorded
    for this same version of the patch against another pre-image whose hunks still apply by their
    context (an earlier patch of the same round was resolved since, and now sits in the pre-image).
    Says which.
    Each is read and checked as apply checks it (resolutions.read, refuse_foreign: it can arrive
    in a pull request); one recorded for an earlier version of the patch that changed other files
    is passed over, as apply passes it over."""
    root = cfg.patch_dir.parent.parent
    exact = resolutions.lookup(cfg, p.name, k)
    for found in ([exact] if exact else []) + [r for r in resolutions.recorded(cfg, p.name) if r != exact]:
        stored = resolutions.read(found, p)
        if found != exact and (resolutions.foreign_paths(p, stored) or not resolutions.same_version(found, p)):
            continue  # recorded for another version of the patch: laying it would undo the edit
        resolutions.refuse_foreign(p, found, stored)
        if _am(g, _resolution_mbox(stored, p), threeway=False):
            rel = str(found.relative_to(root)) if found.is_relative_to(root) else str(found)
            return rel if found == exact else f"{rel} (recorded against another pre-image; applied by context)"
    return None


def _rebase(g: Git, cfg: StackConfig, patches: list[PatchFile], opts: BumpOptions, progress: Progress,
            partial: list[str] | None = None, drop: set[str] = frozenset()):
    idx = Index(g, g.path / ".git" / "dsv4-bump.index")
    spare = Index(g, g.path / ".git" / "dsv4-bump-scratch.index")
    outcomes, blocked = [], []
    for i, p in enumerate(patches, 1):
        if blocked and opts.stop_on_conflict:
            outcomes.append(Outcome(p.name, "not-tried", note="stopped at an earlier conflict (--stop-on-conflict)"))
            continue
        head = g.rev("HEAD")
        idx.load(head)
        o = classify(idx, spare, p, partial)
        say(progress, f"{cfg.name}: {i}/{len(patches)} {p.name}: {o.status}")
        if p.name in drop:
            o.note = "; ".join(filter(None, [o.note, "dropped: fixed upstream (--drop-upstreamed)"]))
            outcomes.append(o)
            continue
        if o.applied:
            part = inside_part(p, partial)[0] if partial is not None else p
            if not _am(g, with_trailer(part), threeway=o.status == "3way"):
                o = dataclasses.replace(o, status="conflict", note="git apply placed it but git am did not")
            elif g.rev("HEAD") == head:
                o = dataclasses.replace(o, status="upstreamed", evidence="empty result: git am made no commit")
        if o.blocking:
            idx.load(head)
            k = resolutions.key(p, idx.blobs(touched(p)))
            used = _reuse_resolution(g, cfg, p, k)
            if used:
                o = dataclasses.replace(o, status="resolved", evidence=f"{o.status} resolved by {used}")
            else:
                blocked.append((p, head, k))
        outcomes.append(o)
    for ix in (idx, spare):
        Path(ix.env["GIT_INDEX_FILE"]).unlink(missing_ok=True)
    return outcomes, blocked


def _conflict_trees(out: Path, cfg: StackConfig, tree: Path, blocked, label: str, force: bool = False,
                    borrow: list[Path] = ()) -> conflicts.Trees:
    """One tree per blocking patch, left mid-`git am --3way` for a person to resolve, named by the
    patch; a tree from an earlier round that holds work is kept (conflicts.py). A tree borrows the
    cached upstream objects (`borrow`) and holds a copy of the few it needs from the bump's own
    trees, which the next round replaces."""
    old_tree = out / f"{cfg.name}.bump-old"

    def make(d: Path, n: int) -> None:
        p, pre, _ = blocked[n]
        g = scratch(d, list(borrow), bare=False)
        Git(tree).run("push", "--quiet", "--no-verify", str(d), f"{pre}:refs/dsv4/pre")
        if (old_tree / ".git").is_dir():  # the old stack's blobs: the 3-way merge's common ancestor
            Git(old_tree).run("push", "--quiet", "--no-verify", str(d), "HEAD:refs/dsv4/old-stack", check=False)
        g.run("checkout", "--quiet", "--detach", pre)
        g.run("am", "--keep-cr", "-k", "--no-signoff", "--quiet", "--3way", check=False, stdin=with_trailer(p))

    return conflicts.plan_and_make(conflicts.root_for(out, cfg.label), [(p.name, pre, k) for p, pre, k in blocked],
                                   make, force=force, target=label, stack=cfg.label)


def _old_stack(cfg: StackConfig, out: Path, old_base, cache: Cache, progress: Progress) -> Path | None:
    try:
        return build_tree(cfg, out, name=f"{cfg.name}.bump-old", cache=cache, base=old_base, force=True,
                          progress=progress).tree
    except Dsv4Error:
        return None


def _range_diff(tree: Path, old_base, old_tree: Path | None) -> str:
    if old_tree is None:
        return "(no range-diff: the stack does not apply at its own pin)"
    g = Git(tree)
    if g.rev("HEAD") == g.rev(BASE_REF) and Git(old_tree).rev("HEAD") == old_base.commit:
        return "(no range-diff: the stack carries no patches)"  # git range-diff refuses two empty ranges
    r = g.run("range-diff", "--no-color", f"{old_base.commit}..{Git(old_tree).rev('HEAD')}",
              f"{BASE_REF}..HEAD", check=False)
    return r.out if r.rc == 0 else f"(range-diff failed: {r.err.strip()})"


def write_into(folder: Path, cfg: StackConfig, refreshed: list[tuple[str, bytes]]) -> None:
    """The refreshed stack as a plain folder (patch files + series), e.g. patches/vllm/bumps/v0.33.0."""
    folder.mkdir(parents=True, exist_ok=True)
    keep = {n for n, _ in refreshed}
    for old in folder.glob("*.patch"):
        if old.name not in keep:
            old.unlink()
    for name, data in refreshed:
        (folder / name).write_bytes(data)
    (folder / "series").write_text(render_series([n for n, _ in refreshed], series_header(cfg.series_path)))


def update_pin(project: Project, cfg: StackConfig, target: targets.Target) -> dict:
    path = project.config_path
    text = path.read_text()
    if "source" in target.pin:
        nth = [s for s in cfg.sources].index(target.spec)
        text = set_keys(text, cfg.sources_table, target.pin["source"], nth=nth)
    text = set_keys(text, cfg.table, target.pin["stack"])  # a release's own table for STACK@TAG
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return target.pin


def _regress(project: Project, cfg: StackConfig, opts: BumpOptions, out: Path, tree: Path, target, cache,
             refreshed, progress) -> dict:
    try:
        if opts.into is None:  # the pin moved: the project itself describes the new tree
            moved = load_project(project.root)  # the primary's release name may be its (new) commit
            sel = moved.stack(cfg.name).selector if cfg.primary else cfg.selector
            return regress(moved, [sel], out=opts.out, progress=progress).to_dict()
        base = build_tree(cfg, out, name=f"{cfg.name}.bump-base", upto=0, base=target.base, cache=cache,
                          force=True, progress=progress)
        patches = [parse_patch_bytes(b, n) for n, b in refreshed]
        nodes = bound_tests(patches)
        if not nodes:
            return {"ok": True, "patches": [], "note": "no Regression-Test ids"}
        t0 = time.monotonic()
        # the variables of the release whose series this is (DSV4_RELEASE_<STACK> included), and the target's
        env = release_tree_env(cfg.name, cfg.release, tree, base.tree, also=[target.label])
        rc, outcomes = run_pytest(project.root, nodes, env)
        res = summarize([(cfg.name, patches)], outcomes)
        report = RegressReport(res, 0.0, rc)  # ok: nothing failed; verified: evidence for every patch
        return {"ok": report.ok, "verified": report.verified, "pytest_rc": rc,
                "seconds": round(time.monotonic() - t0, 2), "patches": [r.to_dict() for r in res]}
    except Dsv4Error as e:
        return {"ok": False, "error": e.one_line(), "patches": []}


def bump(project: Project, stack: str, ref: str | None, *, latest: bool = False, opts: BumpOptions | None = None,
         cache: Cache | None = None, progress: Progress = None) -> BumpReport:
    t0 = time.monotonic()
    with one_test_run():  # the intent run and the regression run share the checks' results and seed
        with stack_lock(project.stack(stack)):  # export, apply, bump and pin of a stack: one at a time
            rep, regress_step = _bump(project, stack, ref, latest=latest, opts=opts, cache=cache, progress=progress)
        if regress_step is not None:  # outside the lock: the tests may build trees of this stack themselves
            rep.regress = regress_step()
            rep.seconds = time.monotonic() - t0
        if rep.semantic is not None or rep.regress is not None:  # tests ran: say how to draw their inputs again
            rep.seed = os.environ.get(SEED_ENV)
    if rep.status == "ok":  # no green without evidence: which carried patches the checks verified
        opts = opts or BumpOptions()
        rep.unverified = evidence.unverified(rep.refreshed, rep.semantic, rep.regress, regress_asked=opts.regress)
    return rep


def _carried_elsewhere(project: Project, cfg: StackConfig, target: targets.Target) -> StackConfig | None:
    """The other release of cfg's stack whose own series is pinned where `target` is, or None. Read
    from what the pin would record (`target.pin`): its tag (`v0.34.0`), else its upstream commit,
    matched by prefix either way (stacks.toml keeps abbreviated ids). Not the tree's commit: for a
    registry release that is the import's own commit, never the upstream one."""
    pin = target.pin.get("stack", {})
    tag, commit = pin.get("tag") or target.label, pin.get("commit") or target.base.commit
    owner = project.stacks.get(cfg.name)
    for r in owner.all_releases() if owner else ():
        if r is cfg:
            continue
        if tag in {r.release, r.tag} - {None}:
            return r
        mine = r.commit or ""
        if min(len(mine), len(commit)) >= 7 and (commit.startswith(mine) or mine.startswith(commit)):
            return r
    return None


def _bump(project: Project, stack: str, ref: str | None, *, latest: bool, opts: BumpOptions | None,
          cache: Cache | None, progress: Progress):
    """The bump itself, under the stack lock; returns the report and its regression step (or None)."""
    t0 = time.monotonic()
    regress_step = None
    opts = opts or BumpOptions()
    cache = cache or Cache.default()
    cfg = project.stack(stack)
    loaded = load_stack(cfg)
    out = _out(project, opts.out)
    outdir = OutDir(out)
    try:
        old = materialize(cfg, cache, progress=progress)
    except SourceError as e:
        if not cfg.raw.get("targets"):
            raise
        # A stack with bump targets (DeepGEMM: no registry carries its pin) is still compared where
        # its pin cannot be fetched (CI without GitHub): the verdicts then come without the pin's
        # pre-image blobs (a patch that would only 3-way merge reads as a conflict) and no range-diff.
        say(progress, f"{stack}: the pin is unreachable here ({e.one_line()}); classifying without it")
        old = None
    # The old stack, applied at its pin: its commits feed the range-diff, and its objects hold
    # the pre-image blobs of every patch after the first, which `--3way` needs.
    target = targets.resolve(cfg, ref, cache, latest=latest, source=opts.source, progress=progress)
    say(progress, f"{stack}: {cfg.tag or cfg.commit[:12]} ({(old.commit if old else cfg.commit)[:12]}) -> {target.label} ({target.base.commit[:12]})")
    if latest and old and target.base.commit == old.commit and target.partial is None:
        # already at the newest: decided before any tree is built or any test runs (seconds)
        say(progress, f"{stack}: already at {target.label}; nothing to do")
        rep = BumpReport(stack, {"label": cfg.tag or cfg.commit, "commit": old.commit, "source": old.source},
                         {"label": target.label, "commit": target.base.commit, "source": target.base.source},
                         [], "", status="current", seconds=time.monotonic() - t0)
        return rep, None
    carrier = _carried_elsewhere(project, cfg, target) if latest and target.partial is None else None
    if carrier is not None:
        # The newest release has a series of its own already (`release add` made it): carrying this
        # older series there too would open a second pull request (or a nightly conflict issue) for
        # a release that is already carried. Decided before any tree is built or any test runs.
        where = carrier.patch_dir.relative_to(project.root) if carrier.patch_dir.is_relative_to(project.root) else carrier.patch_dir
        say(progress, f"{stack}: {target.label} is carried already as {carrier.label} ({where}); nothing to do")
        rep = BumpReport(stack, {"label": cfg.tag or cfg.commit, "commit": old.commit if old else cfg.commit,
                                 "source": old.source if old else ""},
                         {"label": target.label, "commit": target.base.commit, "source": target.base.source,
                          "carried_as": carrier.label},
                         [], "", status="carried", seconds=time.monotonic() - t0)
        return rep, None
    old_tree = _old_stack(cfg, out, old, cache, progress) if old else None
    sem = None
    if opts.semantic:
        with outdir.locked():
            pristine = pristine_checkout(out / f"{stack}.bump-upstream", target.base)
        # Outside the output folder's lock: the intent tests may build trees in OUT themselves (which
        # takes that lock, and recovers the folder: it would drop our staging). The stack lock, held,
        # is passed on to them (locks.child_spawn).
        ported, where = release_port(cfg, target.label)
        sem = semantic_check(project.root, cfg, pristine, loaded.patches, partial=target.partial,
                             ported=ported, ported_where=where, target=target.label, progress=progress)
    with outdir.locked():
        name = f"{stack}.bump"
        staging = outdir.new_staging(name)
        g = Git(staging)
        clone_local(g, target.base.git_dir)  # hard links, or copies (--out on another file system)
        g.run("remote", "remove", "origin", check=False)
        add_alternates(staging / ".git", ([old.git_dir] if old else []) + ([old_tree / ".git"] if old_tree else []))
        g.run("checkout", "--quiet", "-B", f"dsv4/{stack}", target.base.commit)
        g.run("update-ref", BASE_REF, target.base.commit)
        drop = {s.patch for s in sem or [] if s.fixed} if opts.drop_upstreamed else set()
        outcomes, blocked = _rebase(g, cfg, loaded.patches, opts, progress, target.partial, drop)
        hints = advice(project, cfg, target, g, outcomes, loaded.patches)
        outdir.swap_in(name, staging)
    tree = out / name
    pin_source = old.source if old else "unreachable here: no pre-images, no range-diff"
    rep = BumpReport(stack, {"label": cfg.tag or cfg.commit, "commit": old.commit if old else cfg.commit, "source": pin_source},
                     {"label": target.label, "commit": target.base.commit, "source": target.base.source},
                     outcomes, str(tree), semantic=sem)
    if target.what:
        rep.new["what"] = target.what
    rep.new["pin"] = target.pin  # what `release add|move` writes (bump --into leaves the pin alone)
    rep.new["source_index"] = next((i for i, s in enumerate(cfg.sources) if s is target.spec), None)
    rep.hints = hints
    if target.partial is not None:
        rep.new["partial"] = target.partial
    if opts.conflict_trees:
        made = _conflict_trees(out, cfg, tree, blocked, target.label, force=opts.force,
                               borrow=[Path(target.base.git_dir)] + ([Path(old.git_dir)] if old else []))
        rep.conflict_trees, rep.trees = made.made, made.to_dict()
    rep.range_diff = _range_diff(tree, old, old_tree) if old else "(no range-diff: the pin is unreachable here)"
    refreshed = render_patches(tree)
    rep.refreshed = [n for n, _ in refreshed]
    fixed = any(s.fixed for s in sem or [])
    if blocked or any(o.status == "not-tried" for o in outcomes):
        rep.status = "conflicts"
    elif target.partial is not None:
        rep.status = "partial"  # a partial tree is compared against, never exported from or pinned to
    elif (fixed or any(o.status == "upstreamed" for o in outcomes)) and not opts.drop_upstreamed:
        rep.status = "upstreamed"
    if rep.status == "ok":
        if opts.into is not None:
            write_into(opts.into, cfg, refreshed)
            rep.written_to = str(opts.into)
        else:
            export_stack(cfg, tree, remove=True)  # bump's own tree; dropping upstreamed patches was asked for
            rep.written_to = str(cfg.patch_dir)
            rep.pin = update_pin(project, cfg, target)
        if opts.regress:
            def regress_step():
                say(progress, f"{stack}: regression tests on {target.label}")
                return _regress(project, cfg, opts, out, tree, target, cache, refreshed, progress)
    rep.seconds = time.monotonic() - t0
    return rep, regress_step


def record_resolutions(project: Project, stack: str, *, out: Path | None = None) -> list[dict]:
    """Store the resolution made in each conflict tree of the last bump (see module docstring).

    A tree counts as resolved when no conflict marker is left in the files the patch touches;
    its changes are staged and `git am --continue` makes the commit (or the person already did)."""
    cfg = project.stack(stack)
    root = conflicts.root_for(_out(project, out), cfg.label)
    if not root.is_dir():
        raise UsageError(f"{root}: no conflict trees", hint=f"run `dsv4-patch bump {stack} REF` first")
    loaded = {p.name: p for p in load_stack(cfg).patches}
    results = []
    for d in sorted(x for x in root.iterdir() if (x / ".git" / CONFLICT_META).is_file()):
        meta = json.loads((d / ".git" / CONFLICT_META).read_text())
        g = Git(d)
        patch = loaded.get(meta["patch"])
        if patch is None:
            results.append({"patch": meta["patch"], "tree": str(d), "recorded": None,
                            "why": "the patch is no longer in the series"})
            continue
        if (d / ".git" / "rebase-apply").exists():
            marked = [p for p in touched(patch) if (d / p).is_file() and _has_markers(d / p)]
            if marked:
                results.append({"patch": patch.name, "tree": str(d), "recorded": None,
                                "why": "conflict markers left in " + ", ".join(marked)})
                continue
            g.run("add", "-A")
            r = g.run("am", "--continue", check=False)
            if r.rc != 0:
                results.append({"patch": patch.name, "tree": str(d), "recorded": None,
                                "why": "git am --continue failed: " + (r.err or r.out).strip()[:300]})
                continue
        n = g.out("rev-list", "--count", f"{meta['pre']}..HEAD")
        if n != "1":
            results.append({"patch": patch.name, "tree": str(d), "recorded": None,
                            "why": f"expected one resolved commit on top of the pre-image, found {n}"})
            continue
        data, _ = strip_trailer(g.format_patch(f"{meta['pre']}..HEAD"))
        stored = resolutions.store(cfg, patch.name, meta["key"], data, patch.raw)
        conflicts.mark_recorded(d, str(stored.relative_to(project.root)))
        results.append({"patch": patch.name, "tree": str(d), "recorded": str(stored.relative_to(project.root)),
                        "why": ""})
    return results


def _has_markers(path: Path) -> bool:
    data = path.read_bytes()
    return any(line.startswith((b"<<<<<<< ", b">>>>>>> ")) for line in data.split(b"\n"))
