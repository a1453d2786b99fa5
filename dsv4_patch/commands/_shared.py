"""What several commands share: the --json fields of a release, a base already on disk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import StackConfig
from ..errors import Dsv4Error

if TYPE_CHECKING:
    from ..sources import Cache


def release_fields(cfg: StackConfig) -> dict:
    """What every --json row says about the release it is for."""
    return {"stack": cfg.name, "release": cfg.release, "primary": cfg.primary, "label": cfg.label}


def cached_base(cfg: StackConfig, cache: Cache):
    """The stack's base if a source already has it locally (no network)."""
    from ..sources import materialize

    try:
        return materialize(cfg, cache, offline=True)
    except Dsv4Error:
        return None
