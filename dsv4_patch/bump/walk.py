"""`bump STACK --walk A..B`: classify the whole stack at every release (or every N-th commit)
between A and B, carrying on past failures, and name where each patch first stops applying.

Index-only (git apply --cached on a private index in a scratch repo that borrows the imported
trees' objects): no work tree is checked out, so a step costs a read-tree plus a few applies.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Project
from ..errors import Dsv4Error
from ..sources import Cache, Progress, materialize
from ..sources.base import say
from ..stack import load_stack
from . import targets
from .classify import Index, Outcome, classify
from .repo import scratch

STOPS = ("conflict", "obsolete", "upstreamed")


@dataclass
class Step:
    label: str
    commit: str
    source: str
    outcomes: list[Outcome]

    def to_dict(self) -> dict:
        return {"label": self.label, "commit": self.commit, "source": self.source,
                "patches": [o.to_dict() for o in self.outcomes]}


@dataclass
class WalkReport:
    stack: str
    span: str
    patches: list[str]
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0

    def first(self, statuses: tuple[str, ...]) -> dict[str, str | None]:
        """Per patch: the first step whose verdict is in `statuses` (None: never)."""
        res: dict[str, str | None] = {}
        for i, name in enumerate(self.patches):
            res[name] = next((s.label for s in self.steps if s.outcomes[i].status in statuses), None)
        return res

    @property
    def first_stop(self) -> dict[str, str | None]:
        return self.first(STOPS)

    @property
    def exit_code(self) -> int:
        return 3 if any(self.first_stop.values()) else 0

    def to_dict(self) -> dict:
        return {"stack": self.stack, "span": self.span, "patches": self.patches,
                "steps": [s.to_dict() for s in self.steps], "first_stop": self.first_stop,
                "first_3way": self.first(("3way",) + STOPS), "seconds": round(self.seconds, 2),
                "exit_code": self.exit_code}


def walk(project: Project, stack: str, span: str, *, step: int = 1, source: str | None = None,
         cache: Cache | None = None, progress: Progress = None) -> WalkReport:
    t0 = time.monotonic()
    cache = cache or Cache.default()
    cfg = project.stack(stack)
    patches = load_stack(cfg).patches
    points = targets.walk_points(cfg, span, cache, step=step, source=source, progress=progress)
    dirs = {Path(p.base.git_dir) for p in points}
    try:
        pin = materialize(cfg, cache, progress=progress)
        dirs.add(Path(pin.git_dir))
    except Dsv4Error:
        pin = None
    rep = WalkReport(stack, span, [p.name for p in patches])
    with tempfile.TemporaryDirectory(prefix="dsv4-walk-", dir=cache.dir("tmp")) as td:
        g = scratch(Path(td) / "walk.git", sorted(dirs), bare=True)
        idx, spare = Index(g, Path(td) / "walk.index"), Index(g, Path(td) / "spare.index")
        if pin is not None:
            # The stack applied at its pin writes each patch's post-image blobs, i.e. the next
            # patch's pre-image, which `git apply --3way` needs (the upstream tree lacks them).
            idx.load(pin.commit)
            for p in patches:
                idx.apply(p.raw)
        for pt in points:
            idx.load(pt.base.commit)
            outcomes = [classify(idx, spare, p) for p in patches]
            rep.steps.append(Step(pt.label, pt.base.commit, pt.base.source, outcomes))
            say(progress, f"{stack} {pt.label}: " + ", ".join(o.status for o in outcomes))
    rep.seconds = time.monotonic() - t0
    return rep
