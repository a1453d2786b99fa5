"""The Slurm launcher: script rendering (always), and a real single-node Slurm (ci/slurm-up.sh) judging
three bad jobs and one good one from the scheduler's own state. About 90 s: the time-limit job needs
Slurm's 1-minute minimum plus its ~30 s enforcement tick; all jobs run side by side."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dsv4_patch.e2e.launchers import JobSpec
from dsv4_patch.e2e.protocol import RequestSpec, WorkerRequest
from dsv4_patch.e2e.slurm import SlurmConfig, SlurmLauncher, parse_sacct, parse_scontrol, render_script
from dsv4_patch.e2e.stages import judge_case, prepare_case
from dsv4_patch.e2e.verdict import Verdict
from dsv4_patch.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fake_engine_double.py"


def test_script_saves_py_exit_and_carries_the_config(tmp_path):
    cfg = SlurmConfig.from_dict({"partition": "dcu", "gres": "dcu:8", "cpus_per_task": 64, "mem": "240gb",
                                 "time": "02:00:00", "module_purge": True,
                                 "modules": ["compiler/gcc/12.2.0", "compiler/dtk/26.04"],
                                 "setup": ["source /opt/venv/bin/activate"], "env": {"VLLM_ROCM_USE_SKINNY_GEMM": 0}})
    spec = JobSpec("dsv4-e2e-chat32-default", ["python", "-m", "dsv4_patch.e2e.worker", "--request", "r b.json"],
                   tmp_path, env={"FOO": "a b"})
    text = render_script(spec, cfg, pythonpath=Path("/repo"))
    for line in ("#SBATCH --partition=dcu", "#SBATCH --gres=dcu:8", "#SBATCH --cpus-per-task=64",
                 "#SBATCH --mem=240gb", "#SBATCH --time=02:00:00", "module purge", "module load compiler/dtk/26.04",
                 "source /opt/venv/bin/activate", "export VLLM_ROCM_USE_SKINNY_GEMM=0", "export FOO='a b'",
                 "rc=$?", 'echo "PY_EXIT=$rc"', 'exit "$rc"'):
        assert line in text.splitlines(), line
    assert "--request 'r b.json' > \"$RAW\" 2>&1" in text
    # the worker line comes after the environment, and the exit code is saved right after it
    lines = text.splitlines()
    assert lines.index("rc=$?") == next(i for i, l in enumerate(lines) if "dsv4_patch.e2e.worker" in l) + 1


def test_unknown_config_keys_are_rejected():
    with pytest.raises(ConfigError, match="partiton"):
        SlurmConfig.from_dict({"partiton": "dcu"})


def test_parse_scheduler_outputs():
    kv = parse_scontrol("JobId=7 JobName=x JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15")
    assert kv["JobState"] == "TIMEOUT" and kv["ExitCode"] == "0:15"
    rows = parse_sacct("17|COMPLETED|0:0|00:05:15\n17.batch|COMPLETED|0:0|00:05:15\n17.extern|CANCELLED by 0|0:0|00:05:15\n")
    assert [r["State"] for r in rows] == ["COMPLETED", "COMPLETED", "CANCELLED"]


SCENARIOS = {
    # name: (scenario, extra env, expected verdict, expected scheduler state)
    "degraded-exit0": ("j08-weak-probe", {}, Verdict.DEGRADED, "COMPLETED"),
    "python-fails": ("python-fails", {}, Verdict.ERROR, "FAILED"),
    "time-limit": ("hang", {"FAKE_ENGINE_SLEEP": "600"}, Verdict.CRASHED, "TIMEOUT"),
    "coherent": ("coherent", {}, Verdict.COHERENT, "COMPLETED"),
}


@pytest.fixture(scope="module")
def slurm_runs(slurm_cluster, tmp_path_factory):
    """Submit every scenario at once, then follow each to its end."""
    import os

    os.environ.update(slurm_cluster)  # sbatch/squeue/scontrol find the test cluster
    out = tmp_path_factory.mktemp("slurm-e2e")
    cfg = SlurmConfig(time="1", poll_seconds=2, python=sys.executable, follow_timeout_s=240, cpus_per_task=1)
    launcher = SlurmLauncher(cfg, pythonpath=ROOT)
    submitted = {}
    for name, (scenario, env, _, _) in SCENARIOS.items():
        req = WorkerRequest(engine="vllm", model="/models/fake", tp=1, case=name, requests=[RequestSpec("zh-intro", ["你好"])])
        spec = prepare_case(req, "slurm", out, [sys.executable, str(FAKE)], 0, {"FAKE_ENGINE_SCENARIO": scenario} | env)
        submitted[name] = (req, spec, launcher.submit(spec))
    return {name: judge_case(req, "slurm", spec, launcher.wait(job, spec)) for name, (req, spec, job) in submitted.items()}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_real_slurm_job_is_judged_from_the_scheduler_state(slurm_runs, name):
    run = slurm_runs[name]
    _, _, verdict, state = SCENARIOS[name]
    sched = run.outcome.scheduler
    assert sched is not None and sched.state == state, run.outcome.to_dict()
    assert run.judgement.verdict is verdict, run.judgement.reasons
    assert (run.workdir / "job.sbatch").exists()


def test_degraded_job_completed_with_exit_0_is_still_a_failure(slurm_runs):
    run = slurm_runs["degraded-exit0"]
    assert run.outcome.exit_code == 0 and run.outcome.scheduler.exit_code == 0  # everything "green"...
    assert run.judgement.verdict is Verdict.DEGRADED  # ...but the tokens are J08's
    assert "PY_EXIT=0" in (run.workdir / f"slurm-{run.outcome.job_id}.out").read_text()


def test_python_failure_shows_in_both_exit_codes(slurm_runs):
    run = slurm_runs["python-fails"]
    assert run.outcome.exit_code == 1 and run.outcome.scheduler.exit_code == 1
    assert run.judgement.stage_reached == "engine_init"


def test_time_limit_kill_leaves_no_py_exit_and_names_the_stage(slurm_runs):
    run = slurm_runs["time-limit"]
    assert run.outcome.exit_code is None
    assert any("TIMEOUT" in r for r in run.judgement.reasons)
    assert run.judgement.stage_reached == "engine_init (did not finish)"
