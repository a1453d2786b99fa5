"""Where the tool's cache lives: DSV4_PATCH_CACHE, else dsv4-patch/ under XDG_CACHE_HOME (default
~/.cache). Its own module, below everything: the sources' Cache (sources/base.py) and the config
memo (configmemo.py) both start from it. configmemo must not import sources/, which imports config,
which imports configmemo."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("DSV4_PATCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dsv4-patch"
