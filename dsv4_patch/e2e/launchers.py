"""Run a worker command and report what happened, without judging it.

`LocalLauncher` runs it as a subprocess in its own process group (so a hung engine and its spawned
workers can be stopped together). `SlurmLauncher` (slurm.py) writes an sbatch script, submits it and
follows the job. Both return a `JobOutcome`: the Python exit code, the signal, whether a time limit
stopped it, where the raw log and result file are, and (Slurm) the scheduler's own state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class JobSpec:
    name: str  # used for job names and file names
    argv: list[str]  # the worker command
    workdir: Path  # holds request.json, result.json, raw.log
    env: dict[str, str] = field(default_factory=dict)  # added to the inherited environment
    timeout_s: float = 3600.0

    @property
    def log_path(self) -> Path:
        return self.workdir / "raw.log"

    @property
    def result_path(self) -> Path:
        return self.workdir / "result.json"


@dataclass
class SchedulerState:
    job_id: str
    state: str  # COMPLETED, FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY, NODE_FAIL, ...
    exit_code: int | None  # the batch script's exit code (first half of ExitCode a:b)
    signal: int | None  # second half of ExitCode
    source: str  # "sacct" or "scontrol"
    reason: str | None = None
    steps: list[dict] = field(default_factory=list)  # sacct rows: J17, J17.batch, J17.extern

    @property
    def exit_text(self) -> str:
        return f"{self.exit_code if self.exit_code is not None else '?'}:{self.signal if self.signal is not None else '?'}"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class JobOutcome:
    launcher: str
    exit_code: int | None  # the worker's own exit code (PY_EXIT), None when never recorded
    signal: int | None  # signal that killed the worker, where known
    timed_out: bool
    timeout_s: float
    log_path: Path
    result_path: Path
    wall_s: float
    scheduler: SchedulerState | None = None
    job_id: str | None = None
    notes: list[str] = field(default_factory=list)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def to_dict(self) -> dict:
        return {
            "launcher": self.launcher,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "timeout_s": self.timeout_s,
            "log_path": str(self.log_path),
            "result_path": str(self.result_path),
            "wall_s": round(self.wall_s, 3),
            "scheduler": self.scheduler.to_dict() if self.scheduler else None,
            "job_id": self.job_id,
            "notes": self.notes,
        }


# Grace period between SIGTERM and SIGKILL when a local run times out: long enough for vLLM to tear
# down its worker processes, short enough not to hold a CI job.
KILL_GRACE_S = 10.0


class LocalLauncher:
    name = "local"

    def __init__(self, kill_grace_s: float = KILL_GRACE_S):
        self.kill_grace_s = kill_grace_s

    def run(self, spec: JobSpec) -> JobOutcome:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(spec.env)
        start = time.monotonic()
        timed_out = False
        with open(spec.log_path, "wb") as log:
            proc = subprocess.Popen(
                spec.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=spec.workdir, env=env, start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=spec.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                rc = self._stop(proc)
        wall = time.monotonic() - start
        sig = -rc if rc is not None and rc < 0 else None
        exit_code = rc if rc is not None and rc >= 0 else None
        notes = [f"stopped after {spec.timeout_s:g} s"] if timed_out else []
        return JobOutcome(self.name, exit_code, sig, timed_out, spec.timeout_s, spec.log_path,
                          spec.result_path, wall, notes=notes)

    def _stop(self, proc: subprocess.Popen) -> int | None:
        """SIGTERM the whole process group, then SIGKILL what is left."""
        for sig, wait in ((signal.SIGTERM, self.kill_grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                return proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()
