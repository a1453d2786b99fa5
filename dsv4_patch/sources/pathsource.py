"""`path` source: a local git checkout (or bare repo), used as is and never written to."""

from __future__ import annotations

import os
from pathlib import Path

from ..config import SourceSpec, StackConfig
from ..errors import SourceError
from ..gitcmd import Git
from .base import BaseTree, Cache, Progress


def materialize(stack: StackConfig, spec: SourceSpec, cache: Cache, progress: Progress = None, *,
                offline: bool = False) -> BaseTree:
    raw = os.path.expandvars(os.path.expanduser(str(spec.get("path", ""))))
    if not raw:
        raise SourceError(f"stack {stack.name}: path source has no 'path'", hint="set path = \"...\" in stacks.toml")
    path = Path(raw)
    if not path.is_absolute():
        path = (stack.root or stack.patch_dir.parent.parent) / path
    if not path.exists():
        raise SourceError(f"{path} does not exist", hint="clone the upstream there or fix 'path'")
    # safe.directory: a checkout owned by another user is read, never written.
    g = Git(path, extra_config=("safe.directory=*",))
    if g.run("rev-parse", "--git-dir", check=False).rc != 0:
        raise SourceError(f"{path} is not a git repository", hint="point 'path' at a git checkout of the upstream")
    ref = spec.get("ref") or stack.commit
    commit = g.rev(ref)
    if commit is None:
        raise SourceError(f"{path} has no commit {ref}", hint=f"git -C {path} fetch the pin first")
    git_dir = Path(g.out("rev-parse", "--absolute-git-dir"))
    return BaseTree(git_dir=git_dir, commit=commit, source=f"path:{path}")
