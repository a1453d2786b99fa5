"""Verification of a built tree, independent of how its commits were made.

`git am` can exit 0 and still leave a file out (it reports a corrupt binary payload and moves on);
a faster apply path could have its own gaps. So after the commits exist, each patch's commit is
checked to change every path the patch names.
"""

from __future__ import annotations

import re

from .errors import ConflictError, PatchFailure
from .gitcmd import Git
from .patchfile import FileDiff, PatchFile


def required_paths(fd: FileDiff) -> list[str]:
    """The paths a commit must change for this file section (a copy leaves its source alone)."""
    if fd.copy:
        return [fd.new_path] if fd.new_path else []
    return fd.paths


def changed_paths(g: Git, sha: str) -> set[str]:
    out = g.run("diff-tree", "-r", "--no-commit-id", "--name-only", "--no-renames", "--root", "-z", sha).out
    return {p for p in out.split("\0") if p}


def verify_commits(g: Git, patches: list[PatchFile], commits: list[tuple[str, str]], log: str = "") -> None:
    """Raise ConflictError (kind 'incomplete') naming the first patch whose commit misses a path."""
    sha_of = dict(commits)
    for p in patches:
        sha = sha_of.get(p.name)
        if sha is None:
            continue  # an upstreamed patch made no commit; the caller reports that
        changed = changed_paths(g, sha)
        missing = sorted({path for fd in p.files for path in required_paths(fd)} - changed)
        if missing:
            said = next(iter(re.findall(r"^error: .*$", log, re.M)), "")
            msg = f"{p.name}: applied without changing {', '.join(missing)} (a corrupt or incomplete patch)"
            raise ConflictError(msg + (f"; git said: {said}" if said else ""),
                                report=PatchFailure(p.name, "incomplete", msg, missing),
                                hint="run `dsv4-patch check` and re-export the patch")
