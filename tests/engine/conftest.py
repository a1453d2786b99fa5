"""Fixtures for engine tests: a synthetic upstream, a project pinned to it, a private cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synth import Env  # noqa: E402


@pytest.fixture
def env(tmp_path) -> Env:
    return Env(tmp_path)
