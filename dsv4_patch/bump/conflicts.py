"""Conflict trees: one work tree per blocking patch, kept between bump rounds.

    OUT/<label>.bump-conflicts/<patch-stem>/   left mid-`git am --3way` on the patch's pre-image
        .git/dsv4/conflict.json                 stack, patch, pre-image, resolution key, target, the
                                                blocked patches before it, and how the tree was left

A tree is named by its patch (not by a position that changes when an earlier patch gets
resolved). How it was left (HEAD, the index's entries, the content of every file git status
lists) is recorded when it is made, and again when its resolution is recorded. A tree whose
state differs from that record holds a person's work (edits, resolved files, a commit): a later
round keeps it — reused as it is when the same patch blocks on the same pre-image again, left in
place and named in the report otherwise — and only `--force` deletes it. A folder without the
record (not made by bump) is never touched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..gitcmd import Git

META = Path("dsv4") / "conflict.json"


def root_for(out: Path, label: str) -> Path:
    """Where the conflict trees of a bump of `label` (`vllm`, `vllm@v0.33.0`) live."""
    return Path(out) / f"{label}.bump-conflicts"


def tree_name(patch: str) -> str:
    return patch.removesuffix(".patch")


def read_meta(d: Path) -> dict | None:
    p = d / ".git" / META
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def write_meta(d: Path, meta: dict) -> None:
    p = d / ".git" / META
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(p)


def state(d: Path) -> dict:
    """How the tree is now: HEAD, a digest of the index entries (conflict stages included), the
    blob id of each file `git status` lists (None: gone), whether `git am` is still in progress."""
    g = Git(d)
    listed = g.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames").out
    paths = sorted({e[3:] for e in listed.split("\0") if len(e) > 3})
    files: dict[str, str | None] = {p: None for p in paths}
    present = [p for p in paths if (d / p).is_file() or (d / p).is_symlink()]
    if present:
        ids = g.run("hash-object", "--stdin-paths", stdin=("\n".join(present) + "\n").encode()).out.split()
        files.update(zip(present, ids))
    index = hashlib.sha256(g.raw("ls-files", "-s", "-z")).hexdigest()
    return {"head": g.rev("HEAD"), "index": index, "files": files,
            "am": (d / ".git" / "rebase-apply").exists()}


def work_in(d: Path, meta: dict | None) -> list[str]:
    """What a person did in the tree since it was left (or its resolution recorded); [] if nothing.
    A dsv4 tree without a record of how it was left may hold anything: it counts as work."""
    if meta is None:
        return []
    left = meta.get("left")
    if not left:
        return ["unknown (made by an older dsv4-patch, without a record of how it was left)"]
    now = state(d)
    out = []
    if now["head"] != left["head"]:
        n = Git(d).out("rev-list", "--count", f"{left['head']}..{now['head']}") if now["head"] else "?"
        out.append(f"{n} commit(s) on top of the pre-image" if n not in ("0", "?") else "HEAD moved")
    elif now["am"] != left["am"]:
        out.append("git am " + ("restarted" if now["am"] else "finished or aborted"))
    changed = sorted(p for p in set(now["files"]) | set(left["files"])
                     if now["files"].get(p, "clean") != left["files"].get(p, "clean"))
    if changed:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        out.append("edited " + shown)
    if now["index"] != left["index"] and not out:
        out.append("staged changes")
    return out


@dataclass
class Trees:
    """What a round did with the conflict trees."""

    made: dict[str, str] = field(default_factory=dict)  # patch -> tree (new or reused)
    kept: dict[str, list[str]] = field(default_factory=dict)  # patch -> the work it holds (reused as is)
    skipped_before: dict[str, list[str]] = field(default_factory=dict)  # patch -> blocked patches before it
    left: list[dict] = field(default_factory=list)  # trees with work not reused: {patch, tree, work, why}
    removed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def existing(root: Path) -> list[tuple[Path, dict]]:
    if not root.is_dir():
        return []
    return [(d, m) for d in sorted(root.iterdir()) if d.is_dir() and (m := read_meta(d)) is not None]


def plan_and_make(root: Path, blocked: list[tuple[str, str, str]], make, *, force: bool = False,
                  target: str = "", stack: str = "") -> Trees:
    """Bring `root` to one tree per blocked patch ((name, pre-image, key) in series order).

    `make(dest, index)` creates the tree for blocked[index] (left mid-`git am`). A tree holding
    work is reused when its patch blocks on the same pre-image again, and otherwise left in place
    (named in `Trees.left`) unless `force`. Trees without work are reused or removed."""
    res = Trees()
    wanted = {name: (i, pre, k) for i, (name, pre, k) in enumerate(blocked)}
    names = [n for n, _, _ in blocked]
    occupied: set[str] = set()
    for d, meta in existing(root):
        name = meta.get("patch", "")
        w = wanted.get(name)
        same = w is not None and meta.get("pre") == w[1] and meta.get("key") == w[2] and d.name == tree_name(name)
        work = work_in(d, meta)
        if same:
            meta.update({"target": target or meta.get("target"), "skipped_before": names[:w[0]]})
            write_meta(d, meta)
            res.made[name] = str(d)
            if work:
                res.kept[name] = work
            occupied.add(d.name)
            continue
        if work and not force:
            why = ("its patch no longer blocks" if w is None else
                   "made against another pre-image" if meta.get("pre") != w[1] else "made for another version of the patch")
            res.left.append({"patch": name, "tree": str(d), "work": work, "why": why})
            occupied.add(d.name)
            continue
        shutil.rmtree(d)
        res.removed.append(str(d))
    for i, (name, pre, k) in enumerate(blocked):
        res.skipped_before[name] = names[:i]
        if name in res.made:
            continue
        dest = root / tree_name(name)
        if dest.name in occupied or (dest.exists() and read_meta(dest) is None):
            if not any(x["tree"] == str(dest) for x in res.left):
                res.left.append({"patch": name, "tree": str(dest), "work": [],
                                 "why": "no new tree made: a folder not made by bump is there"})
            continue
        make(dest, i)
        write_meta(dest, {"stack": stack, "patch": name, "pre": pre, "key": k, "target": target,
                          "skipped_before": names[:i], "left": state(dest)})
        res.made[name] = str(dest)
    return res


def mark_recorded(d: Path, recorded: str) -> None:
    """After its resolution was stored, the tree's state is the baseline again: nothing unrecorded."""
    meta = read_meta(d) or {}
    meta.update({"left": state(d), "recorded": recorded})
    write_meta(d, meta)
