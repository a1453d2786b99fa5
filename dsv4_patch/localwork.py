"""What a user may have made in a patched tree that replacing it would lose.

Compared with what `apply` recorded (state.json): HEAD, the work tree, every ref (other branches,
tags, the stash, notes) and any git operation left in progress (am, rebase, merge, cherry-pick,
revert, bisect). Ignored files are build outputs: they may go, but the caller says so.
"""

from __future__ import annotations

import os
from pathlib import Path

from .gitcmd import Git

IN_PROGRESS = (
    ("rebase-merge", "a rebase"),
    ("rebase-apply", "a `git am` or rebase"),
    ("MERGE_HEAD", "a merge"),
    ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ("REVERT_HEAD", "a revert"),
    ("BISECT_LOG", "a bisect"),
)


def git_dir(tree: Path) -> Path:
    return Path(tree) / ".git"


def operation_in_progress(tree: Path) -> str | None:
    """'a `git am` or rebase' (etc.) when one is stopped in the middle in this tree."""
    d = git_dir(tree)
    for marker, what in IN_PROGRESS:
        if (d / marker).exists():
            return what
    return None


REFS = ("for-each-ref", "--format=%(refname) %(objectname)")
STATUS = ("status", "--porcelain=v2", "--branch")


def ref_snapshot(g: Git, branch: str) -> dict[str, str]:
    """Every ref except the ones the build itself owns (the stack branch and refs/dsv4/*)."""
    return _refs(g.out(*REFS), branch)


def _refs(out: str, branch: str) -> dict[str, str]:
    refs = dict(ln.split(" ", 1) for ln in out.splitlines() if ln)
    return {r: s for r, s in refs.items() if r != f"refs/heads/{branch}" and not r.startswith("refs/dsv4/")}


def _ref_changes(now: dict[str, str], then: dict[str, str] | None, branch: str) -> list[str]:
    if then is None:  # a tree built before refs were recorded: judge by kind
        then = {r: s for r, s in now.items() if r.startswith("refs/tags/")}
    changed = sorted(r for r, s in now.items() if then.get(r) != s)
    out = []
    heads = [r[len("refs/heads/"):] for r in changed if r.startswith("refs/heads/")]
    tags = [r[len("refs/tags/"):] for r in changed if r.startswith("refs/tags/")]
    others = [r for r in changed if not r.startswith(("refs/heads/", "refs/tags/"))]
    if heads:
        out.append(f"branch{'es' if len(heads) > 1 else ''} {', '.join(heads)}")
    if "refs/stash" in others:
        out.append("a stash (git stash list)")
        others.remove("refs/stash")
    if tags:
        out.append(f"tag{'s' if len(tags) > 1 else ''} {', '.join(tags)}")
    if others:
        out.append(f"refs {', '.join(others)}")
    return out


def local_work(tree: Path, state: dict) -> list[str]:
    """One phrase per kind of work that replacing the tree would lose; empty when there is none.

    Two git processes, run at once (this runs on every apply, a no-op included): `status
    --porcelain=v2 --branch` gives HEAD and the changed paths, `for-each-ref` every ref."""
    g = Git(tree)
    found = []
    op = operation_in_progress(tree)
    if op:
        found.append(f"{op} in progress")
    status, refs = g.run_all(STATUS, REFS)
    head, changed = _status(status.out)
    if head != state.get("tip"):
        found.append(f"HEAD moved from {str(state.get('tip'))[:12]} to {str(head)[:12]} (new commits?)")
    if changed:
        found.append(f"uncommitted changes ({changed} paths)")
    branch = f"dsv4/{state.get('stack', '')}"
    found += _ref_changes(_refs(refs.out, branch), state.get("refs"), branch)
    return found


def head_and_changes(g: Git) -> tuple[str | None, int]:
    """(HEAD's commit, or None when unborn; the number of paths `git status` lists: changed,
    staged, untracked, unmerged) from one process."""
    return _status(g.run(*STATUS).out)


def _status(out: str) -> tuple[str | None, int]:
    """Without -z every entry is one line (a rename names both paths on its line; odd names are quoted)."""
    head, changed = None, 0
    for line in out.splitlines():
        if line.startswith("# branch.oid "):
            oid = line[len("# branch.oid "):].strip()
            head = None if oid == "(initial)" else oid
        elif line and not line.startswith("# "):
            changed += 1
    return head, changed


def ignored_count(tree: Path) -> int:
    """Ignored files and folders (build outputs) in the work tree."""
    out = Git(tree).out("status", "--porcelain", "--ignored", "--untracked-files=normal")
    return sum(1 for ln in out.splitlines() if ln.startswith("!! "))


# A stopped attempt (OUT/.dsv4/failed/<stack>): what apply left there for the person, so that a
# later plain apply can tell a resolution in progress (edits, `git add`, a hand `git am
# --continue`) from an attempt nobody touched, which it may replace.
LEFT = Path("dsv4") / "left.json"


def attempt_snapshot(tree: Path) -> str:
    """sha256 over HEAD, git am's position, `git status` and the bytes of every path it lists."""
    import hashlib

    g = Git(tree)
    h = hashlib.sha256()
    ra = git_dir(tree) / "rebase-apply"
    head, status = g.rev("HEAD") or "", g.run("status", "--porcelain=v1", "-z", "--untracked-files=all").out
    h.update(f"{head}\0{(ra / 'next').read_text() if (ra / 'next').is_file() else ''}\0{status}\0".encode())
    fields = status.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        if entry[0] in "RC":
            i += 1  # the rename's source path follows
        p = Path(tree) / entry[3:]
        data = (os.fsencode(os.readlink(p)) if p.is_symlink() else p.read_bytes() if p.is_file() else b"")
        h.update(entry.encode("utf-8", "surrogateescape") + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def record_attempt(tree: Path) -> None:
    """Called where apply leaves a stopped attempt for the person."""
    import json

    from .atomicio import write_atomic

    f = git_dir(tree) / LEFT
    f.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(f, json.dumps({"snapshot": attempt_snapshot(tree)}))


def attempt_touched(tree: Path) -> bool:
    """Whether a stopped attempt holds work of the person's: it changed since apply left it. An
    attempt without the record (left by an older version) counts when it is mid-am."""
    import json

    if not git_dir(tree).is_dir():
        return False
    try:
        left = json.loads((git_dir(tree) / LEFT).read_text())["snapshot"]
    except (OSError, ValueError, KeyError, TypeError):
        return operation_in_progress(tree) is not None
    return left != attempt_snapshot(tree)


def lock_holders(lock: Path) -> list[int] | None:
    """The processes that have `lock` open (git keeps its `.lock` file open from creating it to
    renaming it), from /proc; None where that cannot be known (no /proc)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    want = os.path.realpath(lock)
    holders = []
    for pid in (p for p in proc.iterdir() if p.name.isdigit()):
        try:
            fds = list((pid / "fd").iterdir())
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == want:
                    holders.append(int(pid.name))
                    break
            except OSError:
                continue
    return holders


def clear_stale_index_lock(tree: Path, why: str) -> bool:
    """Remove .git/index.lock that a killed git left in a tree this tool was changing (`why`
    says which step): only when no process has it open. A lock some process holds, or one whose
    holders cannot be known, is a one-line error. True when one was removed."""
    from .errors import Dsv4Error

    lock = git_dir(tree) / "index.lock"
    if not lock.exists():
        return False
    holders = lock_holders(lock)
    if holders is None:
        raise Dsv4Error(f"{lock}: left by {why}; cannot tell here whether a git process still holds it",
                        hint="if no git command is running in that tree, delete the file and re-run")
    if holders:
        raise Dsv4Error(f"{lock}: a running process (pid {holders[0]}) holds it",
                        hint="wait for that git command to finish, then re-run")
    lock.unlink(missing_ok=True)
    return True
