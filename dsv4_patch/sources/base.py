"""Shared pieces of the source adapters: the cache layout and the result type."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

Progress = Optional[Callable[[str], None]]


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
        env = os.environ.get("DSV4_PATCH_CACHE")
        if env:
            return cls(Path(env))
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return cls(Path(base) / "dsv4-patch")

    def dir(self, *parts: str) -> Path:
        p = self.root.joinpath(*parts)
        p.mkdir(parents=True, exist_ok=True)
        return p


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120]


def say(progress: Progress, msg: str) -> None:
    if progress:
        progress(msg)
