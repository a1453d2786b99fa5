"""Upstream bumps: rebase a stack onto a new upstream, classify each patch, refresh, report.

    classify.py     one patch against one tree (git apply on a private index): the verdicts
    targets.py      REF / --latest / A..B resolved to base trees through the stack's sources
    rebase.py       `bump STACK REF`: rebased tree, refreshed patches, pin, range-diff, regress
    semantic.py     intent tests on the new upstream: needed / fixed-upstream / no-intent
    evidence.py     no green without evidence (exit 4)
    conflicts.py    the conflict trees kept for the person, across rounds
    walk.py         `bump STACK --walk A..B`: every release in between, where each patch stops
    resolutions.py  remembered conflict resolutions under patches/<stack>/resolutions/
    port_advice.py  the report's Advice: a better-fitting carried series, messages naming the old release
    report.py       markdown, JSON and GitHub problem-matcher annotations

No printing here: progress goes through a callback, results are returned as data.
"""

from .classify import Outcome
from .rebase import BumpOptions, BumpReport, bump, record_resolutions
from .walk import WalkReport, walk

__all__ = ["BumpOptions", "BumpReport", "Outcome", "WalkReport", "bump", "record_resolutions", "walk"]
