"""The patched tree: a checkout of the pinned commit with one commit per patch.

    OUT/<stack>   branch dsv4/<stack>; refs/dsv4/base = the pinned base; .git/dsv4/state.json

Built in a staging directory with the commits `git am --3way --keep-cr -k` makes (author, date
and subject kept; fixed committer identity and date, so the same inputs give the same commit
hashes) and swapped in only on success. The commits come from one `git fast-import` where that is
provably the same (fastapply.py); `git am` itself applies each patch it declines. Re-running with the same base and patch bytes is a no-op; with only later patches changed,
the tree keeps its leading commits and re-applies the rest in place (incremental.py).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .advice import keep_work_hint
from .config import StackConfig
from .atomicio import write_atomic
from .errors import ConflictError, Dsv4Error, HunkReport, PatchFailure, PatchFormatError
from .gitcmd import Git, clone_local
from . import incremental
from .localwork import attempt_touched, ignored_count, local_work, record_attempt, ref_snapshot
from .locks import stack_lock
from .outdir import OutDir
from .patchfile import PatchFile
from .sources import BaseTree, Cache, Progress, materialize
from .sources.base import say
from .stack import LoadedStack, load_stack, unparsed_fingerprint
from .verify import verify_commits

BASE_REF = "refs/dsv4/base"
STATE = Path("dsv4") / "state.json"
TRAILER = b"Patch-Filename: "


@dataclass
class ApplyResult:
    stack: str
    tree: Path
    status: str  # applied | noop
    base: str
    source: str
    commits: list[tuple[str, str]]  # (patch name, commit sha)
    seconds: float
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "stack": self.stack, "tree": str(self.tree), "status": self.status, "base": self.base,
            "source": self.source, "commits": [{"patch": p, "commit": c} for p, c in self.commits],
            "seconds": round(self.seconds, 3), "note": self.note,
        }


def with_trailer(patch: PatchFile) -> bytes:
    """The patch with a Patch-Filename line closing its message, so export keeps the file name.

    format-patch --no-stat writes: headers, blank line, body, blank line, diff (an empty body is
    an empty line). The line goes right after the body; exporter.strip_trailer removes it again.
    """
    raw = patch.raw
    head_end = raw.index(b"\n\n") + 2
    diff_at = raw.find(b"\ndiff --git ", head_end - 1)
    body_end = raw.rfind(b"\n", 0, diff_at) + 1  # after the body's last line, before the blank
    return raw[:body_end] + TRAILER + patch.name.encode() + b"\n" + raw[body_end:]


def load_state(tree: Path) -> tuple[dict | None, str | None]:
    """(state, None), (None, None) when there is none, or (None, why) when it is damaged."""
    f = tree / ".git" / STATE
    if not f.exists():
        return None, None
    try:
        state = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {str(e)[:80]}"
    if not isinstance(state, dict) or not {"tip", "base", "fingerprint"} <= state.keys():
        return None, "missing keys"
    return state, None


def read_state(tree: Path) -> dict | None:
    return load_state(tree)[0]


def write_state(tree: Path, state: dict) -> None:
    f = tree / ".git" / STATE
    f.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(f, json.dumps(state, indent=1))


def adopt_tree(stack_cfg: StackConfig, tree: Path) -> None:
    """After export the tree matches the patch files again: record that, so the next apply is a
    no-op instead of refusing to discard 'local commits' that now live in patches/."""
    state = read_state(tree)
    if not state or state.get("upto") is not None:
        return
    try:
        loaded = load_stack(stack_cfg)
        fp = loaded.fingerprint(state.get("fingerprint_source"))
    except Dsv4Error:
        return  # the exported files do not parse; `check` says why, and apply will refuse them
    g = Git(tree)
    state.update(tip=g.rev("HEAD"), commits=_commits(g, state["base"]), fingerprint=fp,
                 patch_files=patch_files_record(loaded.patches))
    write_state(tree, state)


def patch_files_record(patches: list[PatchFile]) -> dict[str, str]:
    """{file name: sha256 of its bytes}: the patch files the tree matches (state "patch_files"),
    so export can tell a file changed since (a hand edit, a `git pull` of patches/) from its own."""
    return {p.name: incremental.patch_digest(p.raw) for p in patches}


def tree_is_pristine(tree: Path, state: dict) -> tuple[bool, str]:
    """True when the tree still is exactly what we built (so replacing it loses nothing)."""
    lost = local_work(tree, state)
    return (not lost), "; ".join(lost)


def _probe_against_head(g: Git, patch: PatchFile) -> str:
    """`git apply --check -v` of the patch against a clean copy of HEAD's index: its messages name
    the hunk that failed and the lines it searched for (the work tree is mid-merge here)."""
    index = g.path / ".git" / "dsv4-probe.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        g.run("read-tree", "HEAD", env=env)
        return g.run("apply", "--cached", "--check", "-v", "-", check=False, stdin=patch.raw, env=env).err
    finally:
        index.unlink(missing_ok=True)


def _failure_details(g: Git, patch: PatchFile, am_log: str) -> PatchFailure:
    """Name the file, the hunk and the upstream lines the failing patch expected."""
    probe = _probe_against_head(g, patch)
    files = set(re.findall(r"CONFLICT \([^)]*\): (?:Merge conflict in )?(\S+)", am_log))
    vanished = set(re.findall(r"CONFLICT \(modify/delete\): (\S+) deleted in HEAD", am_log))
    vanished |= set(re.findall(r"error: (\S+): does not exist in index", probe + am_log))
    hunks = []
    for m in re.finditer(r"error: patch failed: (.+):(\d+)", probe):
        path, line = m.group(1), int(m.group(2))
        files.add(path)
        hunks += [HunkReport(path, h.header, h.expected_upstream)
                  for fd in patch.files if path in fd.paths for h in fd.hunks if h.old_start == line]
    files |= vanished
    kind = "missing-file" if vanished else "conflict"
    where = ", ".join(sorted(files)) or "see the failed tree"
    first = hunks[0].header if hunks else ""
    msg = f"{patch.name}: does not apply at the pin ({kind}) in {where} {first}".strip()
    nul = sorted({h.file for h in hunks if any("\0" in ln for ln in h.expected)})
    if nul:  # not upstream's doing: the patch's own lines are damaged (a hand edit, a broken transfer)
        msg += f": its lines for {', '.join(nul)} hold a NUL byte the upstream file does not have (shown as \\0)"
    return PatchFailure(patch.name, kind, msg, sorted(files), hunks)


def _am(g: Git, staging: Path, patches: list[PatchFile], threeway: bool) -> tuple[int, str]:
    feed = staging / ".git" / "dsv4" / "patches"
    feed.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, p in enumerate(patches):
        f = feed / f"{i:04d}-{p.name}"
        f.write_bytes(with_trailer(p))
        paths.append(str(f))
    args = ["am", "--keep-cr", "-k", "--no-signoff", "--quiet", "--whitespace=nowarn"]
    if threeway:
        args.append("--3way")
    r = g.run(*args, *paths, check=False)
    shutil.rmtree(feed, ignore_errors=True)
    return r.rc, r.out + r.err


def build_tree(
    stack_cfg: StackConfig,
    out: Path,
    *,
    cache: Cache | None = None,
    name: str | None = None,
    upto: int | None = None,
    threeway: bool = True,
    source_kind: str | None = None,
    force: bool = False,
    base: BaseTree | None = None,
    progress: Progress = None,
) -> ApplyResult:
    """Build OUT/<name> (default: the stack name) with the first `upto` patches (default: all)."""
    with stack_lock(stack_cfg):
        return _build_tree(stack_cfg, out, cache=cache, name=name, upto=upto, threeway=threeway,
                           source_kind=source_kind, force=force, base=base, progress=progress)


def _build_tree(stack_cfg, out, *, cache, name, upto, threeway, source_kind, force, base, progress) -> ApplyResult:
    t0 = time.monotonic()
    cache = cache or Cache.default()
    name = name or stack_cfg.label  # OUT/vllm, or OUT/vllm@v0.33.0 for a further release
    fp_source = source_kind or (base.source if base else None)  # part of what makes a build "the same"
    if not threeway:  # a tree the 3-way fallback built is not the one --no-3way asks for
        fp_source = f"{fp_source or ''}+no-3way"
    # A no-op needs only the patch bytes: parse them (and check their paths) once it is not one.
    # Without a built tree there is no no-op: parse first, so a bad patch is refused before OUT
    # is even created.
    built = (Path(out) / name / ".git" / STATE).is_file()
    fp = unparsed_fingerprint(stack_cfg, fp_source, upto) if built else None
    sub = None if fp is not None else _loaded(stack_cfg, upto)
    fp = fp or sub.fingerprint(fp_source)
    outdir = OutDir(out)
    with outdir.locked():
        target = outdir.tree(name)
        if target.exists():
            incremental.recover(target, write_state, force=force)
        notes = list(outdir.notes)
        state, damaged = load_state(target) if target.exists() else (None, None)
        lost = local_work(target, state) if state else []
        if state and base is None and incremental.movable_pin(stack_cfg, state):  # a branch: where is it now?
            base, why = incremental.where_the_pin_is(
                stack_cfg, lambda: materialize(stack_cfg, cache, kind=source_kind, progress=progress))
            notes += why
        if state and not lost and state.get("fingerprint") == fp and (base is None or base.commit == state.get("base")):
            return ApplyResult(stack_cfg.name, target, "noop", state["base"], state["source"],
                               [tuple(c) for c in state["commits"]], time.monotonic() - t0,
                               note="; ".join(notes + ["nothing changed (same base, same patch bytes)"]))
        if not force:
            _refuse_over_a_resolution(outdir, stack_cfg, name)
        if sub is None:
            sub = _loaded(stack_cfg, upto)
            fp = sub.fingerprint(fp_source)  # the bytes just parsed (a file may have changed since)
        patches = sub.patches
        if state:
            if lost and not force:
                raise Dsv4Error(
                    f"{target}: re-applying would lose {'; '.join(lost)}",
                    hint=keep_work_hint(stack_cfg.name, target),
                )
            if not lost:
                res = _apply_incrementally(stack_cfg, target, state, sub, fp, fp_source, upto, base, t0, progress)
                if res:
                    return res
        elif target.exists() and not force and not damaged:
            raise Dsv4Error(f"{target} exists and was not built by dsv4-patch", hint="choose another --out or pass --force")
        if target.exists() and (n := ignored_count(target)):
            notes.append(f"discarded {n} ignored file{'s' if n > 1 else ''} (build outputs) of the previous tree")
        base = base or materialize(stack_cfg, cache, kind=source_kind, progress=progress)
        say(progress, f"{stack_cfg.name}: base {base.commit[:12]} from {base.source}" + (f" ({base.note})" if base.note else ""))
        staging = outdir.new_staging(name)
        g = Git(staging)
        clone_local(g, base.git_dir)  # hard links, or copies (--out on another file system)
        g.run("remote", "remove", "origin")
        g.run("update-ref", BASE_REF, base.commit)
        refs = ref_snapshot(g, f"dsv4/{stack_cfg.name}")
        log = ""
        if patches:
            say(progress, f"{stack_cfg.name}: applying {len(patches)} patch{'' if len(patches) == 1 else 'es'}")
        failed = _make_commits(g, staging, base.commit, patches, threeway, f"dsv4/{stack_cfg.name}",
                               lambda msg: say(progress, f"{stack_cfg.name}: {msg}"))
        if failed:
            idx, log = failed
            full = re.search(r"(No space left on device|Disk quota exceeded)", log)
            if full:  # not a conflict: git could not write (the staging folder goes at the next run)
                raise Dsv4Error(f"{patches[idx].name}: git am could not write in {staging}: {full.group(1)}",
                                hint="free space on that file system (or choose another --out), then apply again",
                                details=log)
            failure = _failure_details(g, patches[idx], log)
            failure.failed_tree = str(_keep_failed(outdir, name, staging))
            raise ConflictError(failure.message, report=failure,
                                hint=f"inspect {failure.failed_tree} (git am --show-current-patch)", details=log)
        commits = _commits(g, base.commit)
        made = {p for p, _ in commits}
        missing = [p for p in patches if p.name not in made]
        if missing:
            p = missing[0]
            failure = PatchFailure(p.name, "upstreamed",
                                   f"{p.name}: its change is already in the base {base.commit[:12]} (applying it changes nothing)",
                                   [f.path for f in p.files])
            failure.failed_tree = str(_keep_failed(outdir, name, staging))
            raise ConflictError(failure.message, report=failure, hint="drop it from the series (see Drop-When:)")
        try:
            verify_commits(g, patches, commits, log)
        except ConflictError as e:
            e.report.failed_tree = str(_keep_failed(outdir, name, staging))
            raise
        if damaged and not force:
            _refuse_unless_same(target, g, damaged)
        if damaged:
            notes.append(f"{target / '.git' / STATE} was damaged ({damaged}); the tree was rebuilt")
        state = {"fingerprint": fp, "fingerprint_source": fp_source,
                 "base": base.commit, "source": base.source, "tip": g.rev("HEAD"),
                 "commits": commits, "stack": stack_cfg.name, "upto": upto, "pin": stack_cfg.commit,
                 "label": stack_cfg.label, "refs": refs,
                 "made": incremental.made_record([p.name for p in patches], [p.raw for p in patches], commits),
                 "patch_files": patch_files_record(patches),
                 "reuse_key": incremental.reuse_key(stack_cfg, fp_source, base.commit)}
        write_state(staging, state)
        outdir.swap_in(name, staging)
        return ApplyResult(stack_cfg.name, target, "applied", base.commit, base.source, commits,
                           time.monotonic() - t0, note="; ".join(filter(None, [base.note, *notes])))


def applies_on(stack_cfg: StackConfig, pristine: Path) -> bool:
    """Whether the whole stack applies on `pristine` (a tree built with upto=0), answered from git
    objects alone when the fast path makes every commit exactly: no second tree is checked out (a
    vLLM checkout is 6,700 files). False means "not known this way": build the tree for git am's
    verdict and its conflict report. Patches that would write outside the tree are refused, as by
    build_tree; the pristine tree's work tree and HEAD are left as they are. What only a checkout
    meets (a file name the file system refuses) is not seen here: `apply` would report it.
    Under the stack's lock, as build_tree: an export at the same time is never read half-written."""
    with stack_lock(stack_cfg):
        patches = _loaded(stack_cfg, None).patches
        g = Git(pristine)
        mails = [with_trailer(p) for p in patches]
        made, _ = incremental.fast_commits(g, g.rev("HEAD"), mails, all_or_nothing=True)
        if len(made) < len(patches):
            return False
        verify_commits(g, patches, list(zip([p.name for p in patches], made)))
        return True


def _loaded(stack_cfg: StackConfig, upto: int | None) -> LoadedStack:
    """The first `upto` patches (default all), parsed, and refused if they would write outside the tree."""
    loaded = load_stack(stack_cfg)
    patches = loaded.patches if upto is None else loaded.patches[:upto]
    _refuse_unsafe(stack_cfg, patches)
    return LoadedStack(stack_cfg, loaded.entries[: len(patches)], patches)


def _keep_failed(outdir: OutDir, name: str, staging: Path) -> Path:
    """Keep the stopped attempt for the person, recording what it was when left (see below)."""
    kept = outdir.keep_failed(name, staging)
    record_attempt(kept)
    return kept


def _refuse_over_a_resolution(outdir: OutDir, stack_cfg: StackConfig, name: str) -> None:
    """A plain apply replaces OUT/.dsv4/failed/<name> when it stops again: refuse while the person
    is resolving there (the attempt changed since apply left it)."""
    failed = outdir.meta / "failed" / name
    if failed.is_dir() and attempt_touched(failed):
        raise Dsv4Error(f"{failed}: a conflict resolution is in progress there (changed since apply stopped); "
                        "a new apply would discard it",
                        hint=f"finish it with `dsv4-patch apply {stack_cfg.label} --continue`, drop it with "
                             f"`dsv4-patch apply {stack_cfg.label} --abort`, or pass --force to discard it")


def _refuse_unless_same(target: Path, built: Git, damaged: str) -> None:
    """A tree whose state.json is damaged may be replaced only by the identical tree (the same
    commits, nothing uncommitted, no work in progress, no refs beyond the build's)."""
    from .localwork import operation_in_progress

    t = Git(target)
    same = (t.rev("HEAD") == built.rev("HEAD") and not t.out("status", "--porcelain")
            and not operation_in_progress(target)
            and set(ref_snapshot(t, "")) - {"refs/heads/" + t.out("branch", "--show-current")}
            <= set(ref_snapshot(built, "")))
    if not same:
        raise Dsv4Error(f"{target / '.git' / STATE}: damaged ({damaged}), and the tree differs from what the "
                        "patch files give (your commits or edits?)",
                        hint="keep them with `dsv4-patch export --tree` after fixing, or pass --force to replace the tree")


def _make_commits(g: Git, staging: Path, base_commit: str, patches: list[PatchFile], threeway: bool,
                  branch: str, say_) -> tuple[int, str] | None:
    """Commit `patches` on `base_commit` in the staging tree and check the result out on `branch`.

    Runs of patches the fast path makes exactly go through one `git fast-import` each; a patch it
    declines goes through `git am` (3-way, conflicts, already-upstream: git am's own behaviour),
    and the fast path resumes after it. After two declines in a row the rest goes to one `git am`
    (a series that no longer matches its blobs, e.g. after a bump, gains nothing from retrying).
    Returns None, or (index of the failing patch, git am's output)."""
    mails = [with_trailer(p) for p in patches]
    done, head, checked_out, declines, why = 0, base_commit, False, 0, None
    while done < len(patches):
        fast, why = incremental.fast_commits(g, head, mails[done:]) if declines < 2 else ([], why)
        if fast:
            if checked_out:  # only the paths that differ are rewritten
                g.run("read-tree", "-m", "-u", "HEAD", fast[-1])
                g.run("update-ref", f"refs/heads/{branch}", fast[-1])
            else:
                g.run("checkout", "--quiet", "-B", branch, fast[-1])
                checked_out = True
            head, done, declines = fast[-1], done + len(fast), 0
            continue
        if not checked_out:
            g.run("checkout", "--quiet", "-B", branch, head)
            checked_out = True
        declines += 1
        batch = patches[done:] if declines >= 2 else patches[done:done + 1]
        more = f" and the {len(batch) - 1} after it" if len(batch) > 1 else ""
        say_(f"git am: {batch[0].name}{more} ({why})")
        rc, log = _am(g, staging, batch, threeway)
        if rc != 0:
            nxt = staging / ".git" / "rebase-apply" / "next"  # git am's 1-based index of the failing patch
            return done + (int(nxt.read_text()) - 1 if nxt.exists() else 0), log
        head, done = g.rev("HEAD"), done + len(batch)
    if not checked_out:
        g.run("checkout", "--quiet", "-B", branch, head)
    return None


def _apply_incrementally(stack_cfg: StackConfig, target: Path, state: dict, sub: LoadedStack, fp: str,
                         fp_source: str | None, upto: int | None, base: BaseTree | None, t0: float,
                         progress: Progress) -> ApplyResult | None:
    """Keep the tree's leading commits whose patches are unchanged and re-apply the rest in place;
    None when that cannot be done exactly (then the caller rebuilds from scratch)."""
    base_commit = state.get("base")
    if not base_commit or (base is not None and base.commit != base_commit):
        return None
    names, raws = [p.name for p in sub.patches], [p.raw for p in sub.patches]
    key = incremental.reuse_key(stack_cfg, fp_source, base_commit)
    k = incremental.reusable_prefix(state, key, names, raws)
    if k is None:
        return None
    kept = [(n, c) for n, _, c in state["made"][:k]]
    start = kept[-1][1] if kept else base_commit
    g = Git(target)
    new, why = incremental.fast_commits(g, start, [with_trailer(p) for p in sub.patches[k:]], all_or_nothing=True)
    if len(new) < len(sub.patches) - k:
        say(progress, f"{stack_cfg.name}: rebuilding ({sub.patches[k + len(new)].name}: {why})")
        return None
    commits = kept + list(zip(names[k:], new))
    verify_commits(g, sub.patches[k:], list(zip(names[k:], new)))  # objects only: the tree is not switched yet
    tip = commits[-1][1] if commits else base_commit
    new_state = {**state, "fingerprint": fp, "fingerprint_source": fp_source, "tip": tip,
                 "pin": stack_cfg.commit, "label": stack_cfg.label,
                 "commits": [list(c) for c in commits], "upto": upto,
                 "made": incremental.made_record(names, raws, commits), "reuse_key": key,
                 "patch_files": patch_files_record(sub.patches)}
    dropped = incremental.switch_in_place(target, state["tip"], tip, f"dsv4/{stack_cfg.name}", new_state, write_state)
    note = f"incremental: kept {k} commits, re-applied {len(new)} patches"
    if dropped:
        note += (f"; discarded {len(dropped)} build output{'s' if len(dropped) > 1 else ''} no longer ignored "
                 f"by the patched .gitignore ({dropped[0]}{', ...' if len(dropped) > 1 else ''})")
    say(progress, f"{stack_cfg.name}: {note}")
    return ApplyResult(stack_cfg.name, target, "applied", base_commit, state["source"], commits,
                       time.monotonic() - t0, note=note)


def _refuse_unsafe(stack_cfg: StackConfig, patches: list[PatchFile]) -> None:
    """Never hand git a patch that writes outside the tree (lint reports the same, earlier)."""
    from .lint import unsafe_path, symlink_escapes

    for p in patches:
        if p.filename_trailer is not None:
            raise PatchFormatError(f"{stack_cfg.patch_dir / p.name}: holds a Patch-Filename: line",
                                   hint="delete it; apply adds it and export removes it (`dsv4-patch check` says the same)")
        for fd in p.files:
            for path in fd.paths:
                why = unsafe_path(path)
                if why:
                    raise PatchFormatError(f"{stack_cfg.patch_dir / p.name}:{fd.line}: {why}: {path}",
                                           hint="patches may only touch paths inside the upstream tree")
            if symlink_escapes(fd):
                raise PatchFormatError(f"{stack_cfg.patch_dir / p.name}:{fd.line}: symlink {fd.path} -> "
                                       f"{fd.symlink_target} points outside the tree", hint="remove the symlink")


def _commits(g: Git, base: str) -> list[tuple[str, str]]:
    """(patch file name, sha) for each commit on top of base, from the Patch-Filename trailer.
    The messages are read as commit objects (`cat-file --batch`, sized): a message may hold any
    byte (a \\x01 in one split a `log --format` record there: its patch seemed already upstream)."""
    shas = g.out("rev-list", "--reverse", f"{base}..HEAD").split()
    if not shas:
        return []
    out = g.run("cat-file", "--batch", stdin=("\n".join(shas) + "\n").encode()).out.encode("utf-8", "surrogateescape")
    res, pos = [], 0
    for sha in shas:
        nl = out.index(b"\n", pos)
        size = int(out[pos:nl].split()[2])
        obj = out[nl + 1:nl + 1 + size]
        pos = nl + 1 + size + 1
        msg = obj.partition(b"\n\n")[2].decode("utf-8", "replace")
        m = re.search(r"^Patch-Filename: (.+)$", msg, re.M)
        res.append((m.group(1).strip() if m else "", sha))
    return res
