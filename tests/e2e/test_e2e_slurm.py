"""The Slurm launcher: script rendering (always), and a real single-node Slurm (ci/slurm-up.sh) judging
three bad jobs and one good one from the scheduler's own state. The jobs take ~90 s (the time-limit job
needs Slurm's 1-minute minimum plus its ~30 s enforcement tick); slurm_background.py submits them when
collection ends and these tests run last, so the wait overlaps the rest of the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_background import SCENARIOS

from dsv4_patch.e2e.launchers import JobSpec
from dsv4_patch.e2e.slurm import SlurmConfig, parse_sacct, parse_scontrol, render_script
from dsv4_patch.e2e.verdict import Verdict
from dsv4_patch.errors import ConfigError

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
