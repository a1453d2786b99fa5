"""What a user may have made in a patched tree that replacing it would lose.

Compared with what `apply` recorded (state.json): HEAD, the work tree, every ref (other branches,
tags, the stash, notes) and any git operation left in progress (am, rebase, merge, cherry-pick,
revert, bisect). Ignored files are build outputs: they may go, but the caller says so.
"""

from __future__ import annotations

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
