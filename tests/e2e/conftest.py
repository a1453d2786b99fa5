"""Fixtures for the e2e harness tests (no GPU): seed test vectors, the fake engine test double, and a
real single-node Slurm started by ci/slurm-up.sh (skipped with its reason where it cannot start)."""

from __future__ import annotations

import os
import subprocess
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


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> dict[str, str]:
    """A real slurmctld + slurmd + munged on loopback; returns the environment for sbatch/squeue."""
    if os.environ.get("DSV4_SKIP_SLURM"):
        pytest.skip("DSV4_SKIP_SLURM is set")
    state = os.environ.get("DSV4_SLURM_DIR", "/tmp/dsv4-slurm")
    try:
        p = subprocess.run(["bash", str(ROOT / "ci" / "slurm-up.sh"), state], capture_output=True, text=True,
                           timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip("ci/slurm-up.sh did not finish in 10 minutes")
    if p.returncode != 0:
        why = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no output"]
        pytest.skip(f"no local Slurm: {why[0]}")
    conf = p.stdout.strip().splitlines()[-1].split("=", 1)[1]
    return {"SLURM_CONF": conf}
