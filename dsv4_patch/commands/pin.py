"""`pin`: move a stack's pin, only where its patches still apply."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import Project
from ..errors import ConflictError

if TYPE_CHECKING:
    from ..pinning import PinResult
    from ..sources import Cache, Progress


def pin(project: Project, stack: str, ref: str, *, release: str | None = None, source: str | None = None,
        cache: Cache | None = None, progress: Progress = None, dry_run: bool = False, check_applies: bool = True,
        force: bool = False) -> PinResult:
    """Move the pin of the stack's primary release (or of `release`) to `ref` through the same
    verification as apply. First checks that every patch still applies there (result on
    `.applies`); a pin the stack would not apply at is refused (ConflictError naming the patches)
    unless `force`, and only reported with dry_run."""
    from ..locks import stack_lock
    from ..pincheck import check_pin
    from ..pinning import pin_stack
    from ..sources import Cache

    cfg = project.target(stack, release)
    verdict = None
    if check_applies and not cfg.primary:  # bump rebases a stack's primary series
        from ..pincheck import PinCheck

        verdict = PinCheck(ref, False, why_unchecked=f"`bump` checks the primary series; for {cfg.label} run "
                                                     f"`dsv4-patch apply {cfg.label}` after the pin moves")
    elif check_applies:
        verdict = check_pin(project, cfg.name, ref, source=source, progress=progress)
        if verdict.checked and not verdict.ok and not (dry_run or force):
            raise ConflictError(f"{cfg.label}: pin not moved to {ref}: {verdict.summary()}",
                                hint=f"`dsv4-patch bump {cfg.label} {ref}` rebases and refreshes the patches; "
                                     "--force moves the pin anyway")
    with stack_lock(cfg):  # export, apply, bump and pin of one stack: one at a time
        res = pin_stack(project, cfg, ref, source=source, cache=cache or Cache.default(),
                        progress=progress, dry_run=dry_run)
    res.applies = verdict
    return res
