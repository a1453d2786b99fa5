"""Fixtures for the e2e harness tests (no GPU): seed test vectors, the fake engine test double, and a
real single-node Slurm started by ci/slurm-up.sh (skipped with its reason where it cannot start)."""

from __future__ import annotations

import os

import sys
import tomllib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXTURES = HERE / "fixtures"
FAKE_ENGINE = HERE / "fake_engine_double.py"


@pytest.fixture(scope="session")
def seed_vectors() -> dict:
    return tomllib.loads((FIXTURES / "seed_vectors.toml").read_text(encoding="utf-8"))


@pytest.fixture
def fake_worker_prefix() -> list[str]:
    return [sys.executable, str(FAKE_ENGINE)]


# The real-Slurm tests spend ~90 s waiting for the scheduler (a time-limit job needs Slurm's 1-minute
# minimum plus its enforcement tick). Their jobs are submitted in a background thread as soon as
# collection ends, and the tests that judge them run last, so that wait overlaps the rest of the suite.
BACKGROUND_FIXTURE = "slurm_runs"


def pytest_collection_modifyitems(session, config, items):
    waiting = [i for i in items if BACKGROUND_FIXTURE in getattr(i, "fixturenames", ())]
    if waiting:
        items[:] = [i for i in items if BACKGROUND_FIXTURE not in getattr(i, "fixturenames", ())] + waiting


def pytest_collection_finish(session):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # every worker collects everything: the worker that runs them starts it (slurm_runs)
    if any(BACKGROUND_FIXTURE in getattr(i, "fixturenames", ()) for i in session.items):
        from slurm_background import start_in_background

        session.config.stash[SLURM_RUNS_KEY] = start_in_background()


SLURM_RUNS_KEY = pytest.StashKey[object]()


@pytest.fixture(scope="session")
def slurm_runs(request):
    """The judged runs of every scenario (slurm_background.SCENARIOS), submitted at collection."""
    future = request.config.stash.get(SLURM_RUNS_KEY, None)
    if future is None:  # collected without the hook (e.g. a plugin reordered items): run it now
        from slurm_background import start_in_background

        future = start_in_background()
    runs, why = future.result()
    if runs is None:
        pytest.skip(why)
    return runs
