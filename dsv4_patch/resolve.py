"""The way through an `apply` that stopped at a conflict: resolve, continue, export.

    dsv4-patch apply vllm             # exit 3: OUT/.dsv4/failed/vllm is left mid-`git am --3way`
    $EDITOR OUT/.dsv4/failed/vllm/…   # fix the conflict markers (plain git am state)
    dsv4-patch apply vllm --continue  # commits the resolution, applies the rest, moves the tree
                                      # to OUT/vllm, remembers the resolution
    dsv4-patch export vllm            # the patch files now carry the resolved change

Each resolution is remembered where `bump` keeps its own (patches/<stack>/resolutions/, keyed by
the patch bytes and the pre-image blobs: dsv4_patch/bump/resolutions.py), so the next `apply`
that meets the same patch on the same files (another checkout, a rebuilt tree, a `bump`) applies
it without stopping. The patch files themselves change only through `export`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .atomicio import write_atomic
from .bump import resolutions
from .config import StackConfig
from .errors import ConflictError, Dsv4Error, UsageError
from .exporter import strip_trailer
from .gitcmd import Git
from .localwork import clear_stale_index_lock, record_attempt
from .outdir import OutDir
from .patchfile import PatchFile
from .sources import Cache, Progress, materialize
from .sources.base import say
from .stack import load_stack
from .tree import BASE_REF, ApplyResult, _commits, _failure_details, adopt_tree, read_state, with_trailer, write_state

MARKERS = (b"<<<<<<< ", b">>>>>>> ")


@dataclass
class Resolved:
    patch: str
    resolution: str  # patches/<stack>/resolutions/... (relative to the project root)
    how: str  # "recorded" (made by hand now) or "reused" (remembered from before)

    def to_dict(self) -> dict:
        return self.__dict__.copy()


@dataclass
class ContinueResult:
    apply: ApplyResult
    resolved: list[Resolved] = field(default_factory=list)

    def to_dict(self) -> dict:
        return self.apply.to_dict() | {"resolved": [r.to_dict() for r in self.resolved]}


def failed_tree(out: Path, stack: str) -> Path:
    return OutDir(out).meta / "failed" / stack


def next_step_hint(stack: str, tree: str | Path, marked: list[str] | None = None) -> str:
    """What to do after `apply` stopped at a conflict (the commands that really work). `marked`:
    the files left with conflict markers (None: not known); none left means the change is to be
    made by hand from the patch git could not apply."""
    then = (f"then run `dsv4-patch apply {stack} --continue` and `dsv4-patch export {stack}`; "
            f"`dsv4-patch apply {stack} --abort` drops the attempt")
    if marked is None:
        return f"resolve the conflict markers in {tree}, {then}"
    if marked:
        return f"resolve the conflict markers in {', '.join(marked)} (in {tree}), {then}"
    return (f"no conflict markers were left (git had no common version to merge with): make the change "
            f"`git -C {tree} am --show-current-patch=diff` shows in {tree} by hand, {then}")


AM_HOOK = "pre-applypatch"


def guard_plain_am(tree: Path, label: str) -> None:
    """`git am --continue` typed in the stopped attempt (the git habit) would commit the resolution
    without remembering it; a pre-applypatch hook there refuses it and names `dsv4-patch apply
    --continue` instead. The tool's own git runs no hooks (core.hooksPath=/dev/null); the hook does
    nothing once the tree has left OUT/.dsv4/failed/ (the finished tree keeps no refusal)."""
    hooks = Path(tree) / ".git" / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    hook = hooks / AM_HOOK
    hook.write_text(
        "#!/bin/sh\n"
        "# Written by dsv4-patch into an apply stopped at a conflict (OUT/.dsv4/failed/<stack>).\n"
        'case "$(pwd -P)" in */.dsv4/failed/*) ;; *) exit 0 ;; esac\n'
        f"echo 'dsv4-patch: not committed: run `dsv4-patch apply {label} --continue` from the project instead "
        "(it commits your resolution, remembers it in the stack folder resolutions/ and applies the rest; "
        "`git am --continue` here would not remember it)' >&2\n"
        "exit 1\n")
    hook.chmod(0o755)


def _mid_am(tree: Path) -> bool:
    return (tree / ".git" / "rebase-apply").is_dir()


def _current(tree: Path, patches: list[PatchFile]) -> PatchFile:
    """The patch `git am` stopped at, by the Patch-Filename line of the message it is applying
    (apply feeds git am only the patches its fast path declines, so the queue index is not the
    series index); the queue index when the message has none."""
    ra = tree / ".git" / "rebase-apply"
    for f in ("final-commit", "msg"):
        m = re.search(r"^Patch-Filename: (.+)$", (ra / f).read_text(errors="replace"), re.M) if (ra / f).exists() else None
        if m:
            found = next((p for p in patches if p.name == m.group(1).strip()), None)
            if found is not None:
                return found
    nxt = ra / "next"
    idx = int(nxt.read_text()) - 1 if nxt.exists() else 0
    return patches[idx]


def _remaining(g: Git, patches: list[PatchFile]) -> list[PatchFile]:
    """The patches after the last one committed on top of the base (in series order)."""
    done = {name for name, _ in _commits(g, g.rev(BASE_REF))}
    last = max((i for i, p in enumerate(patches) if p.name in done), default=-1)
    return patches[last + 1:]


def _am_one(g: Git, patch: PatchFile) -> str:
    """`git am --3way` of one patch, as apply does; on a conflict the tree stays mid-am."""
    r = g.run("am", "--keep-cr", "-k", "--no-signoff", "--quiet", "--whitespace=nowarn", "--3way",
              check=False, stdin=with_trailer(patch))
    return r.out + r.err


def _touched(patch: PatchFile) -> list[str]:
    return sorted({p for fd in patch.files for p in fd.paths})


def _pre_blobs(g: Git, patch: PatchFile, rev: str = "HEAD") -> dict[str, str]:
    """path -> blob id at HEAD ('absent' when missing): the pre-image the patch met (same values
    as bump's index, so bump and apply share keys)."""
    paths = _touched(patch)
    out = g.run("ls-tree", "-z", rev, "--", *paths).out if paths else ""
    found = {}
    for rec in filter(None, out.split("\0")):
        meta, _, path = rec.partition("\t")
        found[path] = meta.split()[2]
    return {p: found.get(p, "absent") for p in paths}


def _marked(tree: Path, patch: PatchFile) -> list[str]:
    out = []
    for rel in _touched(patch):
        f = tree / rel
        if f.is_file() and any(ln.startswith(MARKERS) for ln in f.read_bytes().split(b"\n")):
            out.append(rel)
    return out


def _commit_current(g: Git, patch: PatchFile) -> tuple[bool, str]:
    """Stage the patch's files as the person left them and let `git am --continue` commit with the
    patch's own message; it goes on with the patches after it. (ok, git's log)."""
    paths = [p for p in _touched(patch) if (g.path / p).exists()]
    gone = [p for p in _touched(patch) if not (g.path / p).exists()]
    if paths:
        g.run("add", "--", *paths)
    if gone:
        g.run("rm", "-q", "--cached", "--ignore-unmatch", "--", *gone)
    r = g.run("am", "--continue", check=False)
    return r.rc == 0, r.out + r.err


def _skip_committed(g: Git, patch: PatchFile) -> str:
    """`git am` committed `patch` but was killed before moving its queue on (.git/rebase-apply
    still names it): move on with `git am --skip`, which resets the work tree to HEAD, so only
    when nothing changed since the commit."""
    if g.run("diff", "--quiet", "HEAD", check=False).rc != 0:
        raise Dsv4Error(f"{g.path}: {patch.name} is committed, but git am stopped before moving on and files "
                        "changed since",
                        hint=f"save those edits, run `git -C {g.path} am --skip`, then `--continue` again")
    r = g.run("am", "--skip", check=False)
    return r.out + r.err


RECORDED = Path("dsv4") / "recorded.json"  # in the attempt's .git: resolutions it stored (for --abort)


def _remember(cfg: StackConfig, g: Git, patch: PatchFile, pre: str, key: str, root: Path) -> str:
    import hashlib
    import json

    from .atomicio import write_atomic

    data, _ = strip_trailer(g.format_patch(f"{pre}..{_first_after(g, pre)}"))
    existed = resolutions.path_for(cfg, patch.name, key).exists()
    stored = resolutions.store(cfg, patch.name, key, data, patch.raw)
    if not existed:  # --abort takes back what this attempt added (and only that)
        log = g.path / ".git" / RECORDED
        try:
            entries = json.loads(log.read_text())
        except (OSError, ValueError):
            entries = []
        entries.append({"path": str(stored), "sha256": hashlib.sha256(data).hexdigest()})
        write_atomic(log, json.dumps(entries))
    return str(stored.relative_to(root)) if stored.is_relative_to(root) else str(stored)


PENDING = Path("dsv4") / "pending-resolution.json"  # a hand resolution being committed


def _remember_pending(cfg: StackConfig, g: Git, patches: list[PatchFile], root: Path) -> list[Resolved]:
    """A --continue killed after git am committed the hand resolution but before it was
    remembered: remember it now (the commit right after the recorded pre-image)."""
    f = g.path / ".git" / PENDING
    try:
        p = json.loads(f.read_text())
        name, pre, key = p["patch"], p["pre"], p["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    patch = next((x for x in patches if x.name == name), None)
    made = dict(_commits(g, g.rev(BASE_REF)))
    done = []
    if patch is not None and name in made and g.rev(f"{made[name]}^") == pre \
            and resolutions.lookup(cfg, name, key) is None:
        done.append(Resolved(name, _remember(cfg, g, patch, pre, key, root), "recorded"))
    if patch is None or name in made:  # else git am never committed it: the hand edit is still to do
        f.unlink(missing_ok=True)
    return done


def _forget_recorded(tree: Path) -> list[Path]:
    """Delete the resolutions the attempt in `tree` stored, where they are still its bytes."""
    import hashlib
    import json

    try:
        entries = json.loads((tree / ".git" / RECORDED).read_text())
    except (OSError, ValueError):
        return []
    gone = []
    for e in entries if isinstance(entries, list) else []:
        try:
            f = Path(e["path"])
            if f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == e["sha256"]:
                f.unlink()
                resolutions.source_path(f).unlink(missing_ok=True)
                gone.append(f)
                if f.parent.is_dir() and not any(f.parent.iterdir()):
                    f.parent.rmdir()
        except (OSError, KeyError, TypeError):
            continue
    return gone


def _first_after(g: Git, pre: str) -> str:
    """The commit `git am --continue` made right on top of `pre` (later patches may follow it)."""
    revs = g.out("rev-list", "--reverse", "--ancestry-path", f"{pre}..HEAD").split()
    if not revs:
        raise Dsv4Error(f"{g.path}: the resolution made no commit on top of {pre[:12]}",
                        hint="the resolved patch changes nothing; drop it from the series instead")
    return revs[0]


def _reuse(cfg: StackConfig, g: Git, patch: PatchFile, root: Path) -> str | None:
    """Replace the conflicted attempt by a remembered resolution: the one for exactly this
    pre-image, else one recorded for this patch elsewhere that still applies by its context."""
    key = resolutions.key(patch, _pre_blobs(g, patch))
    exact = resolutions.lookup(cfg, patch.name, key)
    candidates = ([exact] if exact else []) + [r for r in resolutions.recorded(cfg, patch.name) if r != exact]
    for found in candidates:
        diff = _read_resolution(found, patch)
        if found != exact and (_foreign_paths(patch, diff) or not resolutions.same_version(found, patch)):
            # recorded for an earlier version of the patch (edited since): not a resolution of this
            # version; laying it would undo the edit. It is never laid, and not an error
            continue
        _refuse_foreign(patch, found, diff)
        if _fits(g, diff.raw):
            g.run("reset", "-q", "--hard", "HEAD")  # drop the conflicted attempt, then lay the resolution
            g.run("apply", "--index", "--whitespace=nowarn", "-", stdin=diff.raw)
            rel = str(found.relative_to(root)) if found.is_relative_to(root) else str(found)
            return rel if found == exact else f"{rel} (recorded against another pre-image; applied by context)"
    return None


# bump/resolutions.py holds the one reading and checking of a remembered resolution (bump uses it too)
_read_resolution = resolutions.read
_foreign_paths = resolutions.foreign_paths
_refuse_foreign = resolutions.refuse_foreign


def _fits(g: Git, raw: bytes) -> bool:
    """Whether a diff applies to HEAD, checked on a private index (the work tree is mid-merge)."""
    index = g.path / ".git" / "dsv4-resolve.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        g.run("read-tree", "HEAD", env=env)
        return g.run("apply", "--cached", "--check", "-", check=False, stdin=raw, env=env).rc == 0
    finally:
        index.unlink(missing_ok=True)


PRE_IMAGE = re.compile(rb"^index ([0-9a-f]{40})\.\.[0-9a-f]{40}", re.M)


def object_stores(cache: Cache, out: Path, stack: str) -> list[Path]:
    """Repositories that may hold a patch's pre-image blobs: the tree built at the previous pin
    (its commits are the pre-images of each later patch) and every upstream import and mirror in
    the cache (the previous release's files)."""
    stores = [out / stack, out / f"{stack}.base"]
    for sub in ("imports", "git"):
        d = cache.root / sub
        if d.is_dir():
            stores += sorted(d.iterdir())
    return [s for s in stores if (s / "HEAD").exists() or (s / ".git").exists()]


def lay_out_conflict(tree: Path, patch: PatchFile, stores: list[Path]) -> list[str]:
    """Leave conflict markers for the person. `git am --3way` falls back to a merge only where the
    repository has the blobs the patch was made against; a tree built at a new pin has none of
    them. Copy those blobs in from `stores`, then merge the stopped patch into the work tree
    (`git apply --3way`, the index left as `git am --continue` expects). Returns the files with
    markers (empty when the blobs are nowhere: the patch is in .git/rebase-apply/patch)."""
    g = Git(tree)
    conflicted = g.out("diff", "--name-only", "--diff-filter=U").split()
    if conflicted or not _mid_am(tree):
        return conflicted
    for blob in {m.decode() for m in PRE_IMAGE.findall(patch.raw)} - {"0" * 40}:
        if g.run("cat-file", "-e", blob, check=False).rc == 0:
            continue
        for store in stores:
            r = Git(store).run("cat-file", "-e", blob, check=False)
            if r.rc == 0:
                data = Git(store).raw("cat-file", "blob", blob)
                g.run("hash-object", "-w", "--stdin", stdin=data)
                break
    current = tree / ".git" / "rebase-apply" / "patch"
    g.run("apply", "--3way", "--whitespace=nowarn", str(current), check=False)
    return g.out("diff", "--name-only", "--diff-filter=U").split()


def _advance(cfg: StackConfig, tree: Path, patches: list[PatchFile], root: Path, *, by_hand: bool,
             progress: Progress, stores: list[Path] | None = None) -> list[Resolved]:
    """Drive the stopped `git am` to the end: the current patch as the person resolved it (by_hand)
    or by a remembered resolution, then each later conflict by a remembered one. Raises
    ConflictError, tree left mid-am, at the first patch that has none."""
    g = Git(tree)
    done: list[Resolved] = _remember_pending(cfg, g, patches, root)
    first, log = True, ""
    while True:
        if not _mid_am(tree):
            rest = _remaining(g, patches)
            if not rest:
                break
            log = _am_one(g, rest[0])  # the next patch; a stop is handled below like any other
            first = False
            if not _mid_am(tree) and _remaining(g, patches)[:1] == rest[:1]:
                raise Dsv4Error(f"{rest[0].name}: git am neither applied it nor stopped in {tree}", details=log)
            continue
        patch = _current(tree, patches)
        made = dict(_commits(g, g.rev(BASE_REF)))
        if patch.name in made:  # git am was killed between its commit and moving on
            pre = g.rev(f"{made[patch.name]}^")
            key = resolutions.key(patch, _pre_blobs(g, patch, pre))
            if resolutions.lookup(cfg, patch.name, key) is None:  # remember it, as the commit would have been
                rel = _remember(cfg, g, patch, pre, key, root)
                done.append(Resolved(patch.name, rel, "recorded"))
            log = _skip_committed(g, patch)
            first = False
            continue
        pre = g.rev("HEAD")
        key = resolutions.key(patch, _pre_blobs(g, patch))
        how = "recorded"
        if not (first and by_hand):
            used = _reuse(cfg, g, patch, root)
            if used is None:
                failure = _failure_details(g, patch, log)  # git am's CONFLICT lines name the files
                failure.failed_tree = str(tree)
                marked = lay_out_conflict(tree, patch, stores) if stores is not None else None
                guard_plain_am(tree, cfg.label)
                record_attempt(tree)  # left for the person at this patch
                raise ConflictError(failure.message, report=failure, hint=next_step_hint(cfg.label, tree, marked))
            how = "reused"
        else:
            marked = _marked(tree, patch)
            if marked:
                raise ConflictError(f"{patch.name}: conflict markers left in {', '.join(marked)} ({tree})",
                                    hint=f"finish resolving them, then run `dsv4-patch apply {cfg.label} --continue` again")
        first = False
        if how == "recorded":  # a kill between the commit and _remember: the next --continue remembers it
            write_atomic(tree / ".git" / PENDING, json.dumps({"patch": patch.name, "pre": pre, "key": key}))
        ok, log = _commit_current(g, patch)
        if g.rev("HEAD") == pre:
            raise Dsv4Error(f"{patch.name}: the resolution in {tree} changes nothing",
                            hint="if upstream now carries the change, drop the patch from the series; "
                                 f"else redo the edit and run `dsv4-patch apply {cfg.label} --continue`")
        if how == "recorded":
            rel = _remember(cfg, g, patch, pre, key, root)
            (tree / ".git" / PENDING).unlink(missing_ok=True)
        else:
            rel = used
        done.append(Resolved(patch.name, rel, how))
        say(progress, f"{cfg.label}: {patch.name}: resolution {how} ({rel})")
        if not ok and not _mid_am(tree):
            raise Dsv4Error(f"{tree}: git am --continue failed", details=log)
    return done


def _base_source(cfg: StackConfig, cache: Cache, commit: str) -> str:
    try:
        b = materialize(cfg, cache, offline=True)
        return b.source if b.commit == commit else f"commit {commit[:12]}"
    except Dsv4Error:
        return f"commit {commit[:12]}"


def refuse_replacing(cfg: StackConfig, target: Path, force: bool) -> None:
    """The check a plain apply makes before it replaces OUT/<stack>, made before --continue (or a
    reused resolution) swaps the resolved tree over it: nothing the user made there is lost
    unless --force says so."""
    from .advice import keep_work_hint
    from .localwork import local_work
    from .tree import load_state

    if force or not target.exists():
        return
    state, damaged = load_state(target)
    if state is None:
        why = f"its .git/dsv4/state.json is damaged ({damaged})" if damaged else "it was not built by dsv4-patch"
        raise Dsv4Error(f"{target}: {why}; continuing would replace it",
                        hint=f"move it aside, or pass --force to replace it (`dsv4-patch apply {cfg.label} --continue --force`)")
    lost = local_work(target, state)
    if lost:
        raise Dsv4Error(f"{target}: continuing would replace it and lose {'; '.join(lost)}",
                        hint=keep_work_hint(cfg.label, target))


def _finish(cfg: StackConfig, out: Path, tree: Path, cache: Cache, t0: float, done: list[Resolved],
            force: bool = False) -> ApplyResult:
    """Move the completed tree to OUT/<stack> as a tree `apply` built (export works there)."""
    import time

    refuse_replacing(cfg, OutDir(out).tree(cfg.label), force)  # again: the user may have worked there meanwhile
    g = Git(tree)
    base = g.rev(BASE_REF)
    from .localwork import ref_snapshot

    (tree / ".git" / RECORDED).unlink(missing_ok=True)  # finished: its resolutions are kept
    (tree / ".git" / PENDING).unlink(missing_ok=True)
    write_state(tree, {"base": base, "source": _base_source(cfg, cache, base), "stack": cfg.name, "upto": None,
                       "label": cfg.label, "refs": ref_snapshot(g, f"dsv4/{cfg.name}"),
                       "fingerprint_source": None, "tip": None, "commits": [], "fingerprint": None})
    adopt_tree(cfg, tree)
    st = read_state(tree)
    outdir = OutDir(out)
    outdir.swap_in(cfg.label, tree)
    final = outdir.tree(cfg.label)
    return ApplyResult(cfg.name, final, "applied", base, st["source"], [tuple(c) for c in st["commits"]],
                       time.monotonic() - t0,
                       note=f"{len(done)} conflict(s) resolved ("
                            + "; ".join(f"{r.patch}: {r.how} {r.resolution}" for r in done)
                            + f"); run `dsv4-patch export {cfg.label}` to write them into the patch files")


def continue_apply(cfg: StackConfig, out: Path, *, root: Path, cache: Cache | None = None,
                   progress: Progress = None, force: bool = False) -> ContinueResult:
    """`apply STACK --continue`: finish the apply stopped in OUT/.dsv4/failed/<stack>."""
    import time

    t0 = time.monotonic()
    cache = cache or Cache.default()
    tree = failed_tree(out, cfg.label)
    outdir = OutDir(out)
    if outdir.swapping(cfg.label, tree):  # a --continue killed while it swapped this tree in:
        with outdir.locked():  # the recovery completes that swap
            pass
        if outdir.swapped_in.get(outdir.tree(cfg.label)) == tree:
            return ContinueResult(_swapped_in_by_recovery(cfg, outdir, t0), [])
    if not tree.is_dir() or Git(tree).rev(BASE_REF) is None:
        raise UsageError(f"{cfg.label}: no stopped apply to continue in {tree}",
                         hint=f"`dsv4-patch apply {cfg.label}` first; --continue follows an apply that exits 3")
    patches = load_stack(cfg).patches
    if not _mid_am(tree) and not _remaining(Git(tree), patches):  # `git am --continue` was run there already
        made = Git(tree).out("rev-list", "--count", f"{BASE_REF}..HEAD")
        if int(made) != len(patches):
            raise ConflictError(f"{tree}: {made} commits for the {len(patches)} patches of {cfg.label} "
                                "(a patch already upstream, or one skipped with `git am --skip`)",
                                hint="drop such a patch from the series (see Drop-When:), then apply again")
    with OutDir(out).locked():
        refuse_replacing(cfg, OutDir(out).tree(cfg.label), force)  # before anything is done
        clear_stale_index_lock(tree, "a git command killed in the stopped attempt")
        done = _advance(cfg, tree, patches, root, by_hand=True, progress=progress,
                        stores=object_stores(cache, out, cfg.label))
        return ContinueResult(_finish(cfg, out, tree, cache, t0, done, force), done)


def _swapped_in_by_recovery(cfg: StackConfig, outdir: OutDir, t0: float) -> ApplyResult:
    import time

    final = outdir.tree(cfg.label)
    st = read_state(final)
    return ApplyResult(cfg.name, final, "applied", st["base"], st["source"], [tuple(c) for c in st["commits"]],
                       time.monotonic() - t0,
                       note="the --continue killed while it moved the resolved tree here was completed; "
                            f"run `dsv4-patch export {cfg.label}` to write the resolutions into the patch files")


def reuse_after_conflict(cfg: StackConfig, out: Path, failure_tree: Path, *, root: Path, cache: Cache | None = None,
                         progress: Progress = None, force: bool = False) -> ContinueResult | None:
    """After `apply` stopped: when remembered resolutions carry the stack to its end, finish it
    (returns the result); when none fits the stopped patch, leave the failed tree as it was (None).
    A later patch without one raises ConflictError with the tree at that patch."""
    import time

    t0 = time.monotonic()
    cache = cache or Cache.default()
    tree = Path(failure_tree)
    if not _mid_am(tree) or not resolutions.folder(cfg).is_dir():
        return None
    patches = load_stack(cfg).patches
    g = Git(tree)
    if not resolutions.recorded(cfg, _current(tree, patches).name):
        return None
    with OutDir(out).locked():
        head = g.rev("HEAD")
        try:
            done = _advance(cfg, tree, patches, root, by_hand=False, progress=progress,
                            stores=object_stores(cache, out, cfg.label))
        except ConflictError:
            if g.rev("HEAD") == head:  # nothing fitted the first patch: as apply left it
                return None
            raise
        return ContinueResult(_finish(cfg, out, tree, cache, t0, done, force), done)


def prepare_failed_tree(cfg: StackConfig, out: Path, failure_tree: Path, *, cache: Cache | None = None) -> list[str]:
    """After `apply` stopped (no remembered resolution fitted): leave markers to resolve."""
    tree = Path(failure_tree)
    if not _mid_am(tree):
        return []
    marked = lay_out_conflict(tree, _current(tree, load_stack(cfg).patches),
                              object_stores(cache or Cache.default(), out, cfg.label))
    guard_plain_am(tree, cfg.label)
    record_attempt(tree)  # the markers are apply's, not the person's work
    return marked


def abort_apply(cfg: StackConfig, out: Path) -> Path:
    """`apply STACK --abort`: drop the stopped attempt (the patch files and OUT/<stack> stay)."""
    import shutil

    tree = failed_tree(out, cfg.label)
    if not tree.exists():
        raise UsageError(f"{cfg.label}: no stopped apply in {tree}")
    with OutDir(out).locked():
        _forget_recorded(tree)  # resolutions recorded during the attempt go with it
        shutil.rmtree(tree)
    return tree
