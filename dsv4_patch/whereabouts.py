"""Where a stack's pinned commit would come from, said plainly: for a skip reason or an error.

Whether a git-only stack (DeepGEMM) can be built here depends on things a person cannot see from a
one-line "unreachable": the mirror variables, the commit possibly already sitting in the shared
cache from an earlier run, and the network. This lists each place, in the order the tool tries it.
"""

from __future__ import annotations

import os

from .config import StackConfig
from .gitcmd import Git
from .sources import Cache
from .sources.base import slug
from .sources.gitsource import mirror_vars


def _cached_mirror_has(cache: Cache, cfg: StackConfig) -> tuple[str, bool]:
    path = cache.root / "git" / (slug(cfg.upstream.rstrip("/").removesuffix(".git")) + ".git")
    if not (path / "HEAD").exists():
        return str(path), False
    sha = Git(path).rev(cfg.commit)
    return str(path), bool(sha and sha.startswith(cfg.commit))


def explain(cfg: StackConfig, cache: Cache | None = None) -> str:
    """e.g. 'deepgemm 54e22612409 would come from: cache mirror ~/.cache/.../DeepGEMM.git (commit not
    there); DSV4_DEEPGEMM_GIT_MIRROR (unset); https://github.com/... (network)'."""
    cache = cache or Cache.default()
    places = []
    for spec in cfg.sources:
        if spec.kind == "git":
            path, has = _cached_mirror_has(cache, cfg)
            places.append(f"cache mirror {path} ({'has the commit' if has else 'commit not there'})")
            for var in mirror_vars(cfg, spec):
                val = os.environ.get(var)
                places.append(f"{var}={val}" if val else f"{var} (unset)")
            places.append(f"{spec.get('url') or cfg.upstream} (network)")
        elif spec.kind in ("sdist", "wheel"):
            places.append(f"{spec.kind} {spec.get('package')}=={spec.get('version')} from the package index "
                          f"(cached under {cache.root / 'archives'} once downloaded)")
        else:
            places.append(spec.describe())
    return f"{cfg.name} {cfg.commit[:12]} would come from: " + "; ".join(places)
