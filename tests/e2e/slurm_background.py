"""Submit the real-Slurm scenarios in a background thread and judge them when they end.

Started by tests/e2e/conftest.py when collection finishes, so the scheduler's ~90 s (a time-limit
job needs Slurm's 1-minute minimum plus its enforcement tick) overlaps the rest of the suite."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from dsv4_patch.e2e.protocol import RequestSpec, WorkerRequest
from dsv4_patch.e2e.slurm import SlurmConfig, SlurmLauncher
from dsv4_patch.e2e.stages import judge_case, prepare_case
from dsv4_patch.e2e.verdict import Verdict
from dsv4_patch.regress import RUN_DIR_ENV

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAKE_ENGINE = HERE / "fake_engine_double.py"

SCENARIOS = {
    # name: (scenario, extra env, expected verdict, expected scheduler state)
    "degraded-exit0": ("j08-weak-probe", {}, Verdict.DEGRADED, "COMPLETED"),
    "python-fails": ("python-fails", {}, Verdict.ERROR, "FAILED"),
    "time-limit": ("hang", {"FAKE_ENGINE_SLEEP": "600"}, Verdict.CRASHED, "TIMEOUT"),
    "coherent": ("coherent", {}, Verdict.COHERENT, "COMPLETED"),
}


def start_slurm_cluster() -> tuple[dict[str, str] | None, str]:
    """A real slurmctld + slurmd + munged on loopback: (environment for sbatch/squeue, "") or (None, why not)."""
    if os.environ.get("DSV4_SKIP_SLURM"):
        return None, "DSV4_SKIP_SLURM is set"
    state = os.environ.get("DSV4_SLURM_DIR", "/tmp/dsv4-slurm")
    try:
        p = subprocess.run(["bash", str(ROOT / "ci" / "slurm-up.sh"), state], capture_output=True, text=True,
                           timeout=600)
    except subprocess.TimeoutExpired:
        return None, "ci/slurm-up.sh did not finish in 10 minutes"
    if p.returncode != 0:
        why = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no output"]
        return None, f"no local Slurm: {why[0]}"
    return {"SLURM_CONF": p.stdout.strip().splitlines()[-1].split("=", 1)[1]}, ""


def _submit_and_judge() -> tuple[dict | None, str]:
    env, why = start_slurm_cluster()
    if env is None:
        return None, why
    os.environ.update(env)  # sbatch/squeue/scontrol find the test cluster
    # in the run's folder (removed when the run ends; the jobs are judged before that), else a temporary one
    run_dir = os.environ.get(RUN_DIR_ENV)
    out = Path(tempfile.mkdtemp(prefix="slurm-e2e-", dir=run_dir) if run_dir else tempfile.mkdtemp(prefix="dsv4-slurm-e2e-"))
    cfg = SlurmConfig(time="1", poll_seconds=2, python=sys.executable, follow_timeout_s=240, cpus_per_task=1)
    launcher = SlurmLauncher(cfg, pythonpath=ROOT)
    submitted = {}
    for name, (scenario, extra, _, _) in SCENARIOS.items():
        req = WorkerRequest(engine="vllm", model="/models/fake", tp=1, case=name,
                            requests=[RequestSpec("zh-intro", ["你好"])])
        spec = prepare_case(req, "slurm", out, [sys.executable, str(FAKE_ENGINE)], 0,
                            {"FAKE_ENGINE_SCENARIO": scenario} | extra)
        submitted[name] = (req, spec, launcher.submit(spec))
    return {name: judge_case(req, "slurm", spec, launcher.wait(job, spec))
            for name, (req, spec, job) in submitted.items()}, ""


def _submit_judge_and_publish(publish: Path | None) -> tuple[dict | None, str]:
    """With `publish`: the judged runs (or why there are none) are also written there, pickled, for
    the other pytest-xdist workers (tests/e2e/conftest.py); whatever goes wrong is written too."""
    try:
        value = _submit_and_judge()
    except BaseException as e:  # noqa: BLE001 - the readers fail their tests with it
        value = (None, f"error: the background Slurm submission raised {type(e).__name__}: {e}")
        if publish is None:
            raise
    if publish is not None:
        try:
            data = pickle.dumps(value)
        except Exception as e:  # noqa: BLE001
            data = pickle.dumps((None, f"error: the judged Slurm runs cannot be handed over: {e}"))
        tmp = publish.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, publish)
    return value


def start_in_background(publish: Path | None = None) -> "Future[tuple[dict | None, str]]":
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsv4-slurm")
    future = pool.submit(_submit_judge_and_publish, publish)
    pool.shutdown(wait=False)
    return future
