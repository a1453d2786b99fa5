"""What to tell a person whose tree holds work the tool would not keep: the commands that really
work from where they stand (apply refuses to discard it; export only exports commits)."""

from __future__ import annotations

from pathlib import Path

from .gitcmd import Git


def local_work(tree: Path) -> tuple[list[str], list[str]]:
    """(tracked files with uncommitted changes, untracked files) in a patched tree."""
    g = Git(tree)
    changed, untracked = [], []
    for line in g.run("status", "--porcelain", "-z", "--untracked-files=all").out.split("\0"):
        if len(line) > 3:
            (untracked if line.startswith("??") else changed).append(line[3:])
    return changed, untracked


def keep_work_hint(stack: str, tree: Path) -> str:
    """Hint for `apply` refusing to replace a tree with local work."""
    changed, untracked = local_work(tree)
    steps = []
    if untracked:
        steps.append(f"`git -C {tree} add {untracked[0]}{' …' if len(untracked) > 1 else ''}` for new files")
    if changed or untracked:
        steps.append(f"`git -C {tree} commit -a` (a new patch) or `git -C {tree} commit -a --fixup=<commit>` "
                     f"plus `git -C {tree} rebase -i --autosquash refs/dsv4/base` (edits to a patch)")
    steps.append(f"`dsv4-patch export {stack}` writes the commits into the patch files")
    return "to keep them: " + ", then ".join(steps) + "; to discard them: pass --force"


def export_refusal(tree: Path) -> tuple[str, str] | None:
    """(message, hint) when the tree has work `export` cannot see (it exports commits only)."""
    changed, untracked = local_work(tree)
    if not (changed or untracked):
        return None
    what = []
    if changed:
        what.append(f"uncommitted changes in {len(changed)} file(s) ({changed[0]}{', …' if len(changed) > 1 else ''})")
    if untracked:
        what.append(f"{len(untracked)} untracked file(s) ({untracked[0]}{', …' if len(untracked) > 1 else ''})")
    add = f"`git -C {tree} add -A` and " if untracked else ""
    return (f"{tree}: {' and '.join(what)} would not reach the patch files",
            f"{add}`git -C {tree} commit -a` (or --fixup=<commit> plus `git rebase -i --autosquash refs/dsv4/base`), "
            f"then export again; or `git -C {tree} stash -u` to set them aside")
