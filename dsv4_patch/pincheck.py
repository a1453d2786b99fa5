"""Does the stack still apply at a new pin? `pin` and `pin --dry-run` ask before moving it.

The question is the one `bump` answers (rebase every patch onto REF, one verdict per patch), so
it is asked through `bump` itself, writing only under a private temporary folder: the refreshed
patches go to --into there, the pin and patches/ stay untouched, no regression run and no intent tests.

So a pin check says whether the patches *apply*, never that they work there: its summary says the
stack is not verified at REF (no test ran; `bump` and `regress` run them), and its JSON carries
`verified: false`. Exit 0 of `pin` means "moved, and every patch applies", nothing more.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .config import Project
from .errors import Dsv4Error
from .sources import Progress


@dataclass
class PinCheck:
    ref: str
    checked: bool
    broken: list[dict] = field(default_factory=list)  # [{"patch", "status", "files"}]
    applied: int = 0
    why_unchecked: str = ""

    @property
    def ok(self) -> bool:
        return self.checked and not self.broken

    def summary(self) -> str:
        if not self.checked:
            return f"not checked whether the stack applies at {self.ref}: {self.why_unchecked}"
        if not self.broken:
            unverified = (" (applying only, not verified: pin runs no test; `dsv4-patch bump` and `dsv4-patch "
                          "regress` do)") if self.applied else ""
            if self.applied == 1:
                return f"the one patch applies at {self.ref}{unverified}"
            return f"all {self.applied} patches apply at {self.ref}{unverified}"
        total = self.applied + len(self.broken)
        parts = [f"{b['patch']} ({b['status']}{' in ' + ', '.join(b['files']) if b['files'] else ''})"
                 for b in self.broken]
        return f"{len(self.broken)} of {total} patches do not apply at {self.ref}: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return {"ref": self.ref, "checked": self.checked, "ok": self.ok, "verified": False, "applied": self.applied,
                "broken": self.broken, "why_unchecked": self.why_unchecked}


def check_pin(project: Project, stack: str, ref: str, *, source: str | None = None,
              progress: Progress = None) -> PinCheck:
    from .bump import BumpOptions, bump

    with tempfile.TemporaryDirectory(prefix="dsv4-pin-check-") as td:
        # Whether the patches apply is answered by the rebase alone: no intent tests (whether each
        # passes at REF is `bump`'s question: it decides what to drop), no trees left to resolve in
        opts = BumpOptions(regress=False, into=Path(td) / "refreshed", source=source, out=Path(td) / "build",
                           semantic=False, conflict_trees=False)
        try:
            rep = bump(project, stack, ref, opts=opts, progress=progress)
        except Dsv4Error as e:
            return PinCheck(ref, False, why_unchecked=e.one_line())
    broken = [{"patch": o.patch, "status": o.status, "files": list(o.files)}
              for o in rep.outcomes if o.blocking or o.status in ("upstreamed", "not-tried")]
    return PinCheck(ref, True, broken, applied=len(rep.outcomes) - len(broken))
