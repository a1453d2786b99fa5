"""Fixtures for the e2e harness tests (no GPU): the bring-up's test vectors, the fake engine test double, and a
real single-node Slurm started by ci/slurm-up.sh (skipped with its reason where it cannot start)."""

from __future__ import annotations

import os
import pickle
import sys
import time
import tomllib
from pathlib import Path

import pytest

from dsv4_patch.regress import RUN_DIR_ENV

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
    if session.config.option.collectonly:
        return  # nothing will run: submit nothing
    if not any(BACKGROUND_FIXTURE in getattr(i, "fixturenames", ()) for i in session.items):
        return
    from slurm_background import start_in_background

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        session.config.stash[SLURM_RUNS_KEY] = start_in_background()
        return
    # Under xdist every worker collects everything and any one of them may get this file. The first
    # worker to claim the run folder's marker submits the jobs in its own background thread and
    # leaves the judged runs there for whichever worker runs the tests; the others only read them.
    # (Without the run folder, the fixture starts it lazily in the worker that needs it.)
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    try:
        fd = os.open(os.path.join(run_dir, "slurm.owner"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())  # a reader fails at once if this worker is gone
    os.close(fd)
    session.config.stash[SLURM_RUNS_KEY] = start_in_background(publish=Path(run_dir) / "slurm-runs.pickle")


def _published(run_dir: str, limit_s: float = 900) -> tuple[dict | None, str]:
    path, owner = Path(run_dir) / "slurm-runs.pickle", Path(run_dir) / "slurm.owner"
    deadline = time.monotonic() + limit_s
    while not path.exists():
        try:
            os.kill(int(owner.read_text() or "0"), 0)
        except (ValueError, ProcessLookupError):
            if not path.exists():
                return None, "error: the worker that submitted the Slurm jobs ended without their results"
        except PermissionError:
            pass
        if time.monotonic() > deadline:
            return None, f"error: no worker published the Slurm runs in {limit_s:.0f} s ({path})"
        time.sleep(1)
    return pickle.loads(path.read_bytes())


def pytest_sessionfinish(session, exitstatus):
    future = session.config.stash.get(SLURM_RUNS_KEY, None)
    if future is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop or session.shouldfail:
        return  # stopping: nobody is going to read them
    try:
        future.exception(timeout=900)  # the owner stays until its runs are published for the others
    except TimeoutError:
        pass


SLURM_RUNS_KEY = pytest.StashKey[object]()


@pytest.fixture(scope="session")
def slurm_runs(request):
    """The judged runs of every scenario (slurm_background.SCENARIOS), submitted at collection."""
    future = request.config.stash.get(SLURM_RUNS_KEY, None)
    run_dir = os.environ.get(RUN_DIR_ENV)
    if future is not None:
        runs, why = future.result()
    elif run_dir and os.environ.get("PYTEST_XDIST_WORKER") and Path(run_dir, "slurm.owner").exists():
        runs, why = _published(run_dir)  # another worker submitted them
    else:  # collected without the hook (e.g. a plugin reordered items): run it now
        from slurm_background import start_in_background

        runs, why = start_in_background().result()
    if runs is None:
        if why.startswith("error: "):
            pytest.fail(why[len("error: "):])
        pytest.skip(why)
    return runs
