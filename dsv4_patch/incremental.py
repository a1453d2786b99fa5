"""Incremental apply: keep the commits of the unchanged leading patches, re-apply from the first
changed one, and switch the existing tree over in place.

What makes a kept commit safe to keep: the build that made it recorded (patch name, sha256 of the
patch bytes, commit) in the tree's state ("made"), the tree still holds that very commit at that
position (so a commit adopted from the user by export is never mistaken for ours), and the
inputs that are not patch bytes (tool version, the stack's config, the source choice, the base
commit) are the same ("reuse_key"). A commit depends only on its parent and its patch, so the
kept prefix plus the re-applied rest are the commits a full rebuild makes.

The switch: the new commits are written into the tree's object store first (nothing visible
changes, and a failure leaves the tree as it was); then one journaled step moves the work tree,
the index and the branch from the old tip to the new one (`git read-tree -m -u`, which touches
only the paths that differ and refuses to overwrite a local change), and writes the state. A run
killed inside that step is completed by the next one (`recover`), which first checks that the
person changed nothing since: no path outside the journaled ones, no journaled path whose bytes
are neither the old commit's nor the new one's, no commit on the branch and HEAD still on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable

from . import __version__
from .config import StackConfig
from .errors import Dsv4Error
from .atomicio import write_atomic
from .gitcmd import Git, GitFailed

FAST_REF = "refs/dsv4/fast"
JOURNAL = Path("dsv4") / "switch.json"


def patch_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def reuse_key(stack_cfg: StackConfig, fp_source: str | None, base_commit: str) -> str:
    """Everything besides the patch bytes that decides the commits of a build."""
    blob = json.dumps([__version__, stack_cfg.raw, fp_source, base_commit], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


HASH_PIN = re.compile(r"[0-9a-f]{4,40}")


def movable_pin(stack_cfg: StackConfig, state: dict) -> bool:
    """Whether the tree's base came from a pin that can move upstream: a name (not a hash) that a
    git source resolved, i.e. a branch (gitsource re-fetches branches; a tag is looked up in the
    mirror without fetching, as a fresh build does). An apply over such a tree asks the source
    again, so it ends on the commit a fresh build would use (issue 28)."""
    return not HASH_PIN.fullmatch(str(stack_cfg.commit or "")) and str(state.get("source") or "").startswith("git:")


def where_the_pin_is(stack_cfg: StackConfig, materialize: Callable[[], object]) -> tuple[object | None, list[str]]:
    """The base the movable pin names now, or (None, a note) when the source cannot say (offline,
    the mirror unreachable): the tree then stays on the base it has, and the result says so."""
    from .errors import SourceError

    try:
        return materialize(), []
    except SourceError as e:
        return None, [f"pin {stack_cfg.commit} not looked up again ({e.one_line()}); the tree stays on its base"]


def made_record(names: list[str], raws: list[bytes], commits: list[tuple[str, str]]) -> list[list[str]]:
    """What this build made: [patch name, sha256 of its bytes, commit] per patch."""
    return [[n, patch_digest(r), c] for n, r, (_, c) in zip(names, raws, commits)]


def reusable_prefix(state: dict, key: str, names: list[str], raws: list[bytes]) -> int | None:
    """How many leading commits of the tree can be kept (None: the tree cannot be reused)."""
    made, commits = state.get("made"), state.get("commits") or []
    if not isinstance(made, list) or state.get("reuse_key") != key:
        return None
    k = 0
    for i, (name, raw) in enumerate(zip(names, raws)):
        if i >= len(made) or i >= len(commits):
            break
        m_name, m_digest, m_commit = made[i]
        if (m_name, m_digest) != (name, patch_digest(raw)) or list(commits[i]) != [name, m_commit]:
            break
        k += 1
    return k


def fast_commits(g: Git, start: str, mails: list[bytes], *, all_or_nothing: bool = False) -> tuple[list[str], str | None]:
    """Commit what the fast path can make exactly, on top of `start` (see fastapply)."""
    from .fastapply import commit_series  # not needed (nor imported) by a no-op apply

    marks = g.path / ".git" / "dsv4" / "fast-marks"
    marks.parent.mkdir(parents=True, exist_ok=True)
    try:
        return commit_series(g, start, mails, FAST_REF, str(marks), all_or_nothing=all_or_nothing)
    finally:
        marks.unlink(missing_ok=True)
        g.run("update-ref", "-d", FAST_REF, check=False)


def _changed_paths(g: Git, old: str, new: str) -> list[str]:
    out = g.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new).out
    return [p for p in out.split("\0") if p]


def _ignored(g: Git) -> set[str]:
    return set(filter(None, g.run("ls-files", "-z", "--others", "--ignored", "--exclude-standard").out.split("\0")))


def _drop_unignored(g: Git, ignored_before: set[str]) -> list[str]:
    """The build outputs that an ignore rule the switch removed left looking like untracked files
    of the user's: discarded, as a rebuild discards ignored files (else every later apply refuses)."""
    untracked = set(filter(None, g.run("ls-files", "-z", "--others", "--exclude-standard").out.split("\0")))
    gone = sorted(untracked & ignored_before)
    for rel in gone:
        (g.path / rel).unlink(missing_ok=True)
    return gone


def switch_in_place(tree: Path, old: str, new: str, branch: str, state: dict, write_state) -> list[str]:
    """Move the tree from commit `old` to `new` (journaled; see the module docstring). Returns the
    ignored build outputs discarded because the new commits no longer ignore them."""
    g = Git(tree)
    journal = tree / ".git" / JOURNAL
    journal.parent.mkdir(parents=True, exist_ok=True)
    paths = _changed_paths(g, old, new)
    rules_change = any(p == ".gitignore" or p.endswith("/.gitignore") for p in paths)
    ignored_before = _ignored(g) if rules_change else set()
    write_atomic(journal, json.dumps({"old": old, "new": new, "branch": branch,  # never torn
                                      "paths": paths, "state": state}))
    try:
        g.run("read-tree", "-m", "-u", old, new)
    except GitFailed as e:
        journal.unlink()  # read-tree checks everything before it writes: nothing changed
        raise Dsv4Error(f"{tree}: cannot switch to the new commits: {e.err.strip().splitlines()[0]}",
                        hint="commit or export your changes, or pass --force") from None
    _finish(g, new, branch, old, state, write_state)
    journal.unlink()
    return _drop_unignored(g, ignored_before) if ignored_before else []


def _finish(g: Git, new: str, branch: str, old: str | None, state: dict, write_state) -> None:
    g.run("update-ref", f"refs/heads/{branch}", new, *([old] if old else []))
    g.run("symbolic-ref", "HEAD", f"refs/heads/{branch}")
    write_state(g.path, state)


def _moved_head(g: Git, old: str | None, new: str, branch: str) -> str | None:
    """What the person did to HEAD since the switch was cut short (None: nothing): the switch
    moves the branch from `old` to `new` and leaves HEAD on it."""
    head_ref = g.run("symbolic-ref", "-q", "HEAD", check=False).out.strip()
    if head_ref != f"refs/heads/{branch}":
        return f"HEAD left {branch} ({head_ref or 'detached'})"
    at = g.rev(f"refs/heads/{branch}")
    if at not in {old, new} and old is not None:
        return f"{branch} moved to {str(at)[:12]} (a commit made since?)"
    return None


def _edited_switch_paths(g: Git, old: str | None, new: str, paths: list[str]) -> list[str]:
    """Those of the switch's own paths whose work-tree file is neither the old commit's nor the
    new one's: edited by the person after the kill (read-tree writes one or the other)."""
    if old is None or not paths:
        return []
    wanted = set(paths)
    differs = []
    for commit in (old, new):
        index = g.path / ".git" / "dsv4" / "recover.index"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            g.run("read-tree", commit, env=env)
            g.run("update-index", "-q", "--refresh", env=env, check=False)  # content compared, not stat data
            changed = set(g.run("diff-files", "--name-only", "-z", env=env).out.split("\0"))
            present = set(g.run("ls-files", "-z", env=env).out.split("\0"))
        finally:
            index.unlink(missing_ok=True)
        # a path the commit lacks is "as in the commit" when the work tree lacks it too
        differs.append({p for p in wanted
                        if (p in changed if p in present else os.path.lexists(g.path / p))})
    return sorted(differs[0] & differs[1])


def recover(tree: Path, write_state, force: bool = False) -> bool:
    """Complete a switch a killed run left half done. True when one was completed."""
    journal = tree / ".git" / JOURNAL
    if not journal.exists():
        return False
    try:
        j = json.loads(journal.read_text())
        j["new"], j["branch"], j["paths"], j["state"]  # noqa: B018 (all four are needed below)
    except (OSError, ValueError, KeyError, TypeError):
        # Damaged: the journal is written (atomically) before read-tree touches the tree, so a
        # damaged one means the switch never started: the tree and its state are the old ones.
        journal.unlink()
        return False
    from .localwork import clear_stale_index_lock

    clear_stale_index_lock(tree, "an interrupted switch of this tree")  # read-tree killed before its rename
    g = Git(tree)
    ours = set(j["paths"])
    dirty = [p[3:] for p in g.run("status", "--porcelain", "-z", "--untracked-files=all").out.split("\0")
             if len(p) > 3 and p[2] == " "]
    theirs = sorted(p for p in dirty if p not in ours and p.rstrip("/") not in ours)
    if not force:
        theirs += _edited_switch_paths(g, j.get("old"), j["new"], sorted(ours))
        moved = _moved_head(g, j.get("old"), j["new"], j["branch"])
        if moved or theirs:
            what = ([moved] if moved else []) + ([f"{theirs[0]} (+{len(theirs) - 1} more) changed"] if theirs else [])
            raise Dsv4Error(f"{tree}: an interrupted apply was switching this tree, and since then "
                            + " and ".join(what),
                            hint="save that work elsewhere (copy the files; `git branch keep <commit>` for "
                                 "commits), then re-run with --force")
    g.run("read-tree", "--reset", "-u", j["new"])
    _finish(g, j["new"], j["branch"], None, j["state"], write_state)
    journal.unlink()
    return True
