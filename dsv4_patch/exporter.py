"""Export: regenerate patches/<stack>/*.patch and series from the commits on top of the base.

`git format-patch --keep-subject --no-stat --no-signature --zero-commit --full-index` with pinned
diff settings (see gitcmd.py), one file per commit. A commit made by `apply` carries a
`Patch-Filename:` line that names its file; it is stripped here, so apply -> export is
byte-identical. New commits get a file name from their subject.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from .atomicio import write_atomic
from .config import StackConfig
from .errors import Dsv4Error
from .gitcmd import Git
from .locks import stack_lock
from .patchfile import message_problem, patch_name_problem
from .series import read_series, render_series, series_header
from .tree import BASE_REF, adopt_tree

TRAILER_LINE = re.compile(rb"^Patch-Filename: (.+)\n", re.M)


def strip_trailer(chunk: bytes) -> tuple[bytes, str | None]:
    """Remove the Patch-Filename line `apply` added (see tree.with_trailer); return its value."""
    head_end = chunk.index(b"\n\n") + 2
    diff_at = chunk.find(b"\ndiff --git ", head_end - 1)
    m = TRAILER_LINE.search(chunk, head_end, diff_at if diff_at >= 0 else len(chunk))
    if not m:
        return chunk, None
    return chunk[: m.start()] + chunk[m.end():], m.group(1).decode().strip()


@dataclass
class ExportResult:
    stack: str
    written: list[str] = field(default_factory=list)  # files whose bytes changed (or would)
    removed: list[str] = field(default_factory=list)
    series_changed: bool = False
    diff: str = ""  # unified diff of disk -> exported (for --check)

    @property
    def stale(self) -> bool:
        return bool(self.written or self.removed or self.series_changed)

    def to_dict(self) -> dict:
        return {"stack": self.stack, "written": self.written, "removed": self.removed,
                "series_changed": self.series_changed, "stale": self.stale}


def subject_for_name(raw: str) -> str:
    """The Subject as a person reads it, for naming the file: git writes a non-ASCII one as RFC 2047
    encoded words (=?UTF-8?q?...?=), which were slugged as they stand; accents are dropped
    (é -> e). A word that does not decode is left as written."""
    import unicodedata
    from email.errors import HeaderParseError
    from email.header import decode_header, make_header

    try:
        text = str(make_header(decode_header(raw)))
    except (ValueError, LookupError, UnicodeError, AssertionError, HeaderParseError):
        return raw
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def file_name_for(subject: str, taken: set[str]) -> str:
    s = re.sub(r"^\[[^\]]*\]\s*", "", subject)  # "[ROCm][DSV4] x" -> "x" (tags repeat across a stack)
    while re.match(r"^\[[^\]]*\]\s*", s):
        s = re.sub(r"^\[[^\]]*\]\s*", "", s)
    base = re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")[:60].rstrip("-") or "patch"
    name, n = f"{base}.patch", 2
    while name in taken:
        name, n = f"{base}-{n}.patch", n + 1
    return name


def render_patches(tree: Path) -> list[tuple[str, bytes]]:
    """(file name, bytes) for each commit between refs/dsv4/base and HEAD, in order."""
    g = Git(tree)
    if g.rev(BASE_REF) is None:
        raise Dsv4Error(f"{tree}: no {BASE_REF}", hint="export works on a tree made by `dsv4-patch apply`")
    if g.out("status", "--porcelain", "--untracked-files=no"):
        raise Dsv4Error(f"{tree}: uncommitted changes", hint="commit them (one commit per patch) before exporting")
    shas = g.out("rev-list", "--reverse", "--topo-order", f"{BASE_REF}..HEAD").split()
    for sha in shas:
        _check_message(g, tree, sha)
    # One format-patch per commit: splitting one --stdout stream on "From <sha>" lines would also
    # split at such a line inside a commit message.
    chunks = [_format_one(g, sha) for sha in shas]
    for sha, chunk in zip(shas, chunks):
        if not chunk.strip():  # format-patch writes nothing for a commit that changes nothing, or a merge
            parents, _, subject = g.out("log", "-1", "--format=%P%x00%s", sha).partition("\0")
            what = "a merge" if len(parents.split()) > 1 else "empty (it changes no file)"
            raise Dsv4Error(f"{tree}: commit {sha[:12]} {subject[:60]!r} is {what}; a patch file cannot carry it",
                            hint=f"drop it (`git -C {tree} rebase -i {BASE_REF}`), then export again")
    out, taken = [], set()
    for sha, chunk in zip(shas, chunks):
        chunk, name = strip_trailer(chunk)
        if name is not None and (why := patch_name_problem(name) or ("is the series file" if name == "series" else None)):
            raise Dsv4Error(f"{tree}: commit {sha[:12]} has Patch-Filename: {name!r}, which {why}",
                            hint="reword the commit (git rebase -i) to name one file like fix-x.patch, or drop the line")
        if name is None:
            subj = re.search(rb"^Subject: (.*(?:\n .*)*)", chunk, re.M)
            subject = subj.group(1).decode("utf-8", "replace").replace("\n ", " ") if subj else "patch"
            name = file_name_for(subject_for_name(subject), taken)
        if name in taken:
            raise Dsv4Error(f"{tree}: two commits claim {name}", hint="fix the Patch-Filename: lines in the commit messages")
        taken.add(name)
        _refuse_unsafe_paths(tree, sha, name, chunk)
        out.append((name, chunk))
    return out


def _refuse_unsafe_paths(tree: Path, sha: str, name: str, chunk: bytes) -> None:
    """What apply refuses (tree._refuse_unsafe) is never written: a link out of the tree, a path
    into .git. The next apply would refuse the stack export made."""
    from .errors import PatchFormatError
    from .lint import symlink_escapes, unsafe_path
    from .patchfile import parse_diff

    text = chunk.decode("utf-8", "surrogateescape")
    at = text.find("\ndiff --git ")
    try:  # the diff only: the message's own rules (metadata) are `check`'s to report
        files = parse_diff(text[at + 1:], name) if at >= 0 else []
    except PatchFormatError as e:
        raise Dsv4Error(f"{tree}: commit {sha[:12]}: the patch export would write is refused by apply ({e.message})",
                        hint="please report it; the commit itself is kept in the tree") from None
    for fd in files:
        why = next((w for w in map(unsafe_path, fd.paths) if w), None)
        if why or symlink_escapes(fd):
            what = f"{why}: {fd.path}" if why else f"symlink {fd.path} -> {fd.symlink_target} points outside the tree"
            raise Dsv4Error(f"{tree}: commit {sha[:12]} ({name}): {what}; apply would refuse the patch",
                            hint="change the commit so the link stays inside the tree (or drop it), then export")


def _format_one(g: Git, sha: str) -> bytes:
    return g.format_patch_one(sha)


def _check_message(g: Git, tree: Path, sha: str) -> None:
    """Refuse a commit message that would not come back from its patch file unchanged."""
    msg = g.run("log", "-1", "--format=%B", sha).out
    lines = msg.split("\n")
    first_body = next((i for i in range(1, len(lines)) if lines[i].strip()), None)
    for i, line in enumerate(lines[1:], 2):
        why = message_problem(line)
        if i - 1 == first_body and re.match(r"(?i)(from|subject|date):", line):
            why = "git am reads it as a header that replaces the author, subject or date"
        if why:
            raise Dsv4Error(f"{tree}: commit {sha[:12]} message line {i} {line[:50]!r}: {why}",
                            hint="reword it (git rebase -i; e.g. indent the line by one space), then export")


def exportable_problem(stack: StackConfig, tree: Path) -> str | None:
    """Why `tree` must not be exported over the stack's patch files (None when it may be)."""
    from .localwork import operation_in_progress
    from .tree import load_state

    op = operation_in_progress(tree)
    if op:
        return f"{op} is in progress (finish it or abort it first; a failed build is for inspection only)"
    state, damaged = load_state(tree)
    if damaged:
        return f"its .git/dsv4/state.json is damaged ({damaged}); run `dsv4-patch apply {stack.name}` first"
    if state is None:
        return "it was not built by `dsv4-patch apply` (no .git/dsv4/state.json)"
    if state.get("stack") not in (None, stack.name) or state.get("label") not in (None, stack.label):
        return f"it is a tree of {state.get('label') or state.get('stack')!r}, not {stack.label!r}"
    if state.get("upto") is not None:
        return f"it holds only the first {state['upto']} patches of the stack"
    if state.get("pin") not in (None, stack.commit):
        return f"it was built on the pin {state['pin']}, but the stack is now pinned to {stack.commit}"
    g = Git(tree)
    base = g.rev(BASE_REF)
    if base is None or base != state.get("base"):
        return f"its {BASE_REF} is not the base it was built on ({str(state.get('base'))[:12]})"
    if g.run("merge-base", "--is-ancestor", base, "HEAD", check=False).rc != 0:
        return f"HEAD does not descend from {BASE_REF}"
    return None


def export_stack(stack: StackConfig, tree: Path, *, check: bool = False,
                 remove: Collection[str] | bool = (), force: bool = False) -> ExportResult:
    """Write the stack's files from `tree`. A patch file that the tree no longer has is removed
    only when `remove` names it (or is True): anything else is an error naming the files. A patch
    file that changed since the tree was built from it is overwritten only with `force`."""
    with stack_lock(stack):  # never interleaved with an apply/bump/pin of the same stack
        return _export_stack(stack, tree, check=check, remove=remove, force=force)


def changed_since_build(stack: StackConfig, tree: Path, names: Collection[str]) -> list[str]:
    """Those of `names` whose file in the patch folder is not the bytes the tree was built from
    (or last exported): edited by hand, or pulled, after the build. A file the build did not
    have counts when it exists. Empty for a tree without that record (built before it was kept,
    partial, or not built by apply)."""
    from .tree import read_state

    state = read_state(tree) or {}
    record = state.get("patch_files")
    made = state.get("made")
    if record is None and isinstance(made, list) and all(isinstance(m, list) and len(m) == 3 for m in made):
        # a tree built before "patch_files" was kept: its build's bytes, unless it was exported since
        if [[n, c] for n, _, c in made] == [list(c) for c in state.get("commits") or []]:
            record = {n: d for n, d, _ in made}
    if not isinstance(record, dict) or state.get("upto") is not None:
        return []
    changed = []
    for name in names:
        f = stack.patch_dir / name
        if f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() != record.get(name):
            changed.append(name)
    return changed


def _export_stack(stack: StackConfig, tree: Path, *, check: bool, remove: Collection[str] | bool,
                  force: bool = False) -> ExportResult:
    patches = render_patches(tree)
    res = ExportResult(stack.name)
    old_names = [e.name for e in read_series(stack.series_path)] if stack.series_path.exists() else []
    new_names = [n for n, _ in patches]
    diffs = []
    for name, data in patches:
        path = stack.patch_dir / name
        old = path.read_bytes() if path.exists() else b""
        if old != data:
            res.written.append(name)
            diffs += difflib.unified_diff(old.decode("utf-8", "replace").splitlines(True),
                                          data.decode("utf-8", "replace").splitlines(True),
                                          f"a/{path.name}", f"b/{path.name}")
    res.removed = [n for n in old_names if n not in new_names]
    unknown = [] if remove is True else [n for n in remove if n not in res.removed]
    if unknown:
        raise Dsv4Error(f"--remove {unknown[0]}: not a patch this export would delete",
                        hint=f"it would delete: {', '.join(res.removed) or 'nothing'}")
    refused = [n for n in res.removed if remove is not True and n not in remove]
    if refused and not check:
        raise Dsv4Error(f"{tree}: export would delete {len(refused)} patch file(s) the tree no longer has: "
                        f"{', '.join(refused)}",
                        hint="pass --remove " + " --remove ".join(refused) + " to delete them, or restore the commits")
    for n in res.removed:
        diffs.append(f"removed: {n}\n")
    series_text = render_series(new_names, series_header(stack.series_path))
    old_series = stack.series_path.read_text() if stack.series_path.exists() else ""
    if series_text != old_series:
        res.series_changed = True
        diffs += difflib.unified_diff(old_series.splitlines(True), series_text.splitlines(True), "a/series", "b/series")
    res.diff = "".join(diffs)
    if check:
        return res
    changed = [] if force else changed_since_build(stack, tree, res.written)
    if changed:
        raise Dsv4Error(f"{stack.patch_dir}: {len(changed)} patch file(s) changed since {tree} was built from them "
                        f"({', '.join(changed)}); export would overwrite them with the tree's commits",
                        hint=f"`dsv4-patch apply {stack.label}` builds from the files as they are now (commit "
                             "your tree's work first); or pass --force to overwrite them")
    done: list[str] = []
    try:
        _probe_writable(stack.patch_dir)  # a read-only patches/ fails here, before any file is written
        _clear_stale_temps(stack.patch_dir)
        for name, data in patches:
            if name in res.written:
                write_atomic(stack.patch_dir / name, data)
                done.append(name)
        if res.series_changed:
            write_atomic(stack.series_path, series_text)
            done.append("series")
        for n in res.removed:
            (stack.patch_dir / n).unlink(missing_ok=True)
            done.append(f"removed {n}")
    except OSError as e:
        raise Dsv4Error(f"{e.filename or stack.patch_dir}: cannot write ({e.strerror or e})"
                        + (f"; already written: {', '.join(done)}" if done else "; nothing written"),
                        hint="make the patch folder writable (or free space), then export again") from None
    adopt_tree(stack, tree)
    return res


def _clear_stale_temps(folder: Path) -> None:
    """The temporary files (`.<name>.tmp-<pid>`, atomicio.write_atomic) an export killed while it
    wrote left in the patch folder, whose process is gone: under the stack's lock no other writer of
    this folder runs, and they would stay as hidden junk in the checkout (issue 28)."""
    import os

    for f in folder.glob(".*.tmp-*"):
        m = re.fullmatch(r"\..+\.tmp-(\d+)", f.name)
        if not m or not f.is_file() or f.is_symlink():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # a live process's (not ours to remove)
        except ProcessLookupError:
            f.unlink(missing_ok=True)
        except (PermissionError, OverflowError, ValueError):
            continue


def _probe_writable(folder: Path) -> None:
    """Create and remove a file in `folder` (made if missing): OSError when it cannot be written."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".dsv4-probe-{os.getpid()}"
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    probe.unlink()
