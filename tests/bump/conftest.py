"""Bump fixtures: the engine tests' synthetic upstream and project (tests/engine/synth.py), plus a
history on that upstream that gives every bump verdict once (bumpkit.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "engine")]

from bumpkit import BumpEnv  # noqa: E402


@pytest.fixture
def benv(tmp_path) -> BumpEnv:
    return BumpEnv(tmp_path)
