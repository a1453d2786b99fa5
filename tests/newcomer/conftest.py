"""Fixtures for the newcomer-path tests: the engine tests' synthetic upstream and project
(tests/engine/synth.py), and the command line run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
sys.path.insert(0, str(ENGINE_TESTS))

from synth import Env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"


@pytest.fixture
def env(tmp_path) -> Env:
    return Env(tmp_path)


def run_cli(env, *args, check=None, extra_env=None, project=True):
    """`dsv4-patch ARGS --project <synthetic project>` in a child process, with a private cache."""
    argv = [sys.executable, str(TOOL), *args] + (["--project", str(env.root)] if project else [])
    p = subprocess.run(argv, capture_output=True, text=True,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root), "COLUMNS": "80",
                            **(extra_env or {})})
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture
def cli():
    return run_cli
