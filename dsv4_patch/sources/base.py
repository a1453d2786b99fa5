"""Shared pieces of the source adapters: the cache layout and the result type."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..cachedir import cache_root
from ..errors import SourceError

Progress = Optional[Callable[[str], None]]


class CacheError(SourceError):
    """The tool's cache cannot be used (a folder of it cannot be made): not one source's fault, so
    it is said alone, not as one of the sources that failed."""


@dataclass(frozen=True)
class BaseTree:
    """A repository that holds the pinned tree as `commit` (an import commit for archives)."""

    git_dir: Path
    commit: str
    source: str  # e.g. "sdist:vllm==0.27.1" — shown to the user and recorded in the tree
    note: str = ""  # e.g. "cached", "downloaded 39.3 MB in 2.1 s"


@dataclass(frozen=True)
class Cache:
    root: Path

    @classmethod
    def default(cls) -> "Cache":
        return cls(cache_root())

    def dir(self, *parts: str) -> Path:
        """The cache folder `parts`, made when missing. One that cannot be made (the cache path under
        a file, a read-only or full file system) is a one-line SourceError naming it and the
        variable that moves the cache (exit 1), not an OSError traceback."""
        p = self.root.joinpath(*parts)
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self.unusable(p, e) from None
        return p

    def unusable(self, path: Path, e: OSError) -> CacheError:
        given = os.environ.get("DSV4_PATCH_CACHE")
        now = f"it is DSV4_PATCH_CACHE={given}" if given else f"the default is {self.root}"
        return CacheError(f"cache folder {path} cannot be made: {e.strerror or type(e).__name__}",
                           hint=f"set DSV4_PATCH_CACHE to a folder you can write; {now}")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120]


def say(progress: Progress, msg: str) -> None:
    if progress:
        progress(msg)
