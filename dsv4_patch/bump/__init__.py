"""Upstream bumps: rebase a stack onto a new upstream, classify each patch, refresh, report.

    classify.py     one patch against one tree (git apply on a private index): the verdicts
    targets.py      REF / --latest / A..B resolved to base trees through the stack's sources
    rebase.py       `bump STACK REF`: rebased tree, refreshed patches, pin, range-diff, regress
    walk.py         `bump STACK --walk A..B`: every release in between, where each patch stops
    resolutions.py  remembered conflict resolutions under patches/<stack>/resolutions/
    report.py       markdown, JSON and GitHub problem-matcher annotations

No printing here: progress goes through a callback, results are returned as data.
"""

from .classify import Outcome
from .rebase import BumpOptions, BumpReport, bump, record_resolutions
from .walk import WalkReport, walk

__all__ = ["BumpOptions", "BumpReport", "Outcome", "WalkReport", "bump", "record_resolutions", "walk"]
