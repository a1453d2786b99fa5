"""The stage runner: run the worker for each case of a suite through a launcher and judge the result.

Each case (suite variant) gets its own directory under the run's output directory:

    <out>/<suite>/<case>/request.json   what the worker is asked to do
    <out>/<suite>/<case>/raw.log        the worker's stdout+stderr (every engine process)
    <out>/<suite>/<case>/result.json    what the worker recorded, stage by stage
    <out>/<suite>/<case>/case.json      the harness's judgement of all of the above
    <out>/<suite>/<case>/job.sbatch     (Slurm) the script that was submitted

The worker command is `python -m dsv4_patch.e2e.worker --request ... --result ...`; tests replace the
`python -m dsv4_patch.e2e.worker` part with a scripted fake engine.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .judge import RunJudgement, judge_run
from .launchers import JobOutcome, JobSpec
from .logscan import LogScan, scan_log
from .protocol import WorkerRequest, read_result
from .verdict import TokenRules

WORKER_MODULE = "dsv4_patch.e2e.worker"


@dataclass
class CaseRun:
    suite: str
    case: str
    workdir: Path
    request: WorkerRequest
    outcome: JobOutcome
    result: dict | None
    scan: LogScan
    judgement: RunJudgement

    def generations(self) -> list[dict]:
        return list((self.result or {}).get("generations", []))

    def to_dict(self) -> dict:
        r = self.result or {}
        return {
            "suite": self.suite,
            "case": self.case,
            "workdir": str(self.workdir),
            "engine": self.request.engine,
            "engine_version": r.get("engine_version"),
            "model": self.request.model,
            "tp": self.request.tp,
            "engine_args": self.request.engine_args,
            "hardware": r.get("hardware"),
            "verdict": self.judgement.verdict.value,
            "judgement": self.judgement.to_dict(),
            "outcome": self.outcome.to_dict(),
            "stages": r.get("stages", []),
            "generations": self.generations(),
            "log": self.scan.to_dict(),
        }


def worker_command(python: str = sys.executable) -> list[str]:
    return [python, "-m", WORKER_MODULE]


def prepare_case(request: WorkerRequest, suite: str, out_dir: Path, worker_prefix: list[str],
                 timeout_s: float, env: dict[str, str] | None = None) -> JobSpec:
    workdir = out_dir / suite / request.case
    workdir.mkdir(parents=True, exist_ok=True)
    # A result or exit code left from an earlier run must never be read as this run's.
    for stale in ("result.json", "raw.log", "py_exit", "case.json"):
        (workdir / stale).unlink(missing_ok=True)
    req_path = workdir / "request.json"
    req_path.write_text(request.to_json(), encoding="utf-8")
    argv = list(worker_prefix) + ["--request", str(req_path), "--result", str(workdir / "result.json")]
    return JobSpec(name=f"dsv4-e2e-{suite}-{request.case}", argv=argv, workdir=workdir, env=dict(env or {}),
                   timeout_s=timeout_s)


def judge_case(request: WorkerRequest, suite: str, spec: JobSpec, outcome: JobOutcome) -> CaseRun:
    result, problem = read_result(outcome.result_path)
    scan = scan_log(outcome.log_text())
    judgement = judge_run(outcome, result, problem, scan, TokenRules(max_repeat_run=request.max_repeat_run))
    run = CaseRun(suite, request.case, spec.workdir, request, outcome, result, scan, judgement)
    (spec.workdir / "case.json").write_text(json.dumps(run.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
    return run


def run_cases(requests: list[WorkerRequest], suite: str, launcher, out_dir: Path, worker_prefix: list[str],
              timeout_s: float, env: dict[str, str] | None = None) -> list[CaseRun]:
    """Run every case; a launcher that can submit (Slurm) gets all jobs queued before any is followed."""
    specs = [prepare_case(r, suite, out_dir, worker_prefix, timeout_s, env) for r in requests]
    if hasattr(launcher, "submit"):
        import time

        started = time.monotonic()
        job_ids = [launcher.submit(s) for s in specs]
        outcomes = [launcher.wait(j, s, started) for j, s in zip(job_ids, specs)]
    else:
        outcomes = [launcher.run(s) for s in specs]
    return [judge_case(r, suite, s, o) for r, s, o in zip(requests, specs, outcomes)]
