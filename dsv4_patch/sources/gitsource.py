"""`git` source: one shared bare mirror per upstream under the user cache directory.

Only what the pin needs is fetched (the pinned commit or tag, with full history and blobs:
`git am --3way` needs the pre-image blobs, so no `--filter=tree:0` and no shallow clone).
The URL can be replaced by a mirror: the variable named by `mirror_env` in stacks.toml, or
DSV4_GIT_MIRROR_<STACK>, wins over `url`.
"""

from __future__ import annotations

import os
import re

from ..config import SourceSpec, StackConfig
from ..errors import SourceError
from ..gitcmd import Git, init_repo
from .base import BaseTree, Cache, Progress, say, slug

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
HEX = re.compile(r"[0-9a-f]{4,40}")


def mirror_vars(stack: StackConfig, spec: SourceSpec) -> list[str]:
    names = [spec.get("mirror_env")] if spec.get("mirror_env") else []
    return names + [f"DSV4_GIT_MIRROR_{stack.name.upper()}"]


def resolve_url(stack: StackConfig, spec: SourceSpec) -> str:
    for var in mirror_vars(stack, spec):
        if os.environ.get(var):
            return os.environ[var]
    url = spec.get("url") or stack.upstream
    if not url:
        raise SourceError(f"stack {stack.name}: git source has no url")
    return url


def mirror_repo(cache: Cache, stack: StackConfig) -> Git:
    path = cache.dir("git") / (slug(stack.upstream.rstrip("/").removesuffix(".git")) + ".git")
    if not (path / "HEAD").exists():
        init_repo(path, bare=True)
    return Git(path, extra_config=("protocol.file.allow=always",))


def _find(g: Git, ref: str, tag: str | None) -> str | None:
    """The commit `ref` names in the mirror, without fetching; branches are always re-fetched."""
    if HEX.fullmatch(ref):
        # An abbreviated pin is resolved through its tag when the stack has one.
        for cand in ([f"refs/tags/{tag}"] if tag else []) + [ref]:
            sha = g.rev(cand)
            if sha and sha.startswith(ref):
                return sha
        return None
    return g.rev(f"refs/tags/{ref}")


def fetch_ref(stack: StackConfig, spec: SourceSpec, cache: Cache, ref: str, progress: Progress = None, *,
              offline: bool = False) -> tuple[Git, str]:
    """Make `ref` (full sha, abbreviated sha of the tag, tag or branch) present in the mirror."""
    g = mirror_repo(cache, stack)
    tag = stack.tag if ref == stack.commit else None
    sha = _find(g, ref, tag)
    if sha:
        return g, sha
    if offline:
        raise SourceError(f"{ref} is not in the local mirror {g.path}", hint="run without offline mode to fetch it")
    url = resolve_url(stack, spec)
    say(progress, f"fetching {ref} from {url}")
    if FULL_SHA.match(ref):
        refspecs = [ref]
    elif HEX.fullmatch(ref):
        if not tag:
            raise SourceError(f"abbreviated commit {ref} cannot be fetched by itself", hint="pin a tag or the full hash")
        refspecs = [f"+refs/tags/{tag}:refs/tags/{tag}"]
    else:
        refspecs = [f"+refs/tags/{ref}:refs/tags/{ref}", f"+refs/heads/{ref}:refs/remotes/upstream/{ref}"]
    errors = []
    for rs in refspecs:
        r = g.run("fetch", "--no-tags", "--quiet", url, rs, check=False, env={"GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "30"})
        if r.rc == 0:
            break
        errors.append(r.err.strip().splitlines()[-1] if r.err.strip() else f"exit {r.rc}")
    else:
        vars_ = " or ".join(mirror_vars(stack, spec))
        raise SourceError(f"git fetch {url} failed: {errors[-1]}", hint=f"set {vars_} to a reachable mirror")
    sha = _find(g, ref, tag) or (None if HEX.fullmatch(ref) else g.rev(f"refs/remotes/upstream/{ref}"))
    if not sha:
        raise SourceError(f"{url} has no commit {ref}", hint="check the pin in patches/stacks.toml")
    return g, sha


def materialize(stack: StackConfig, spec: SourceSpec, cache: Cache, progress: Progress = None, *,
                offline: bool = False) -> BaseTree:
    g = mirror_repo(cache, stack)
    had = _find(g, stack.commit, stack.tag)  # already in the shared mirror: nothing is fetched
    g, sha = fetch_ref(stack, spec, cache, stack.commit, progress, offline=offline)
    # Label the tree with where the commit really came from: a mirror variable pointing somewhere
    # unreachable must not be credited with a commit the cache already had.
    url = resolve_url(stack, spec)
    return BaseTree(git_dir=g.path, commit=sha, source=f"git:{g.path}" if had else f"git:{url}",
                    note=f"already in the local mirror; {url} not contacted" if had else f"fetched from {url}")
