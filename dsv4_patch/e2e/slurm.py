"""Slurm launcher: sbatch script from a small TOML config, submit, follow, read the scheduler's state.

The job script saves the Python exit code itself (the gfx936 bring-up's PY_EXIT pattern):

    python -m dsv4_patch.e2e.worker ... > "$RAW" 2>&1
    rc=$?
    echo "PY_EXIT=$rc"
    exit "$rc"

so the harness has the workload's exit code, the scheduler's state/exit code (sacct, or scontrol where
accounting is not configured) and the verdict as three separate signals.

Config (`--slurm-config FILE`):

    [slurm]
    partition = "dcu"               # omitted: the cluster's default partition
    gres = "dcu:8"                  # or gpus = 8
    cpus_per_task = 64
    mem = "240gb"
    time = "02:00:00"
    account = "proj"                # optional
    extra_sbatch = ["--exclusive"]  # more #SBATCH lines, verbatim
    module_purge = true
    modules = ["compiler/gcc/12.2.0", "compiler/dtk/26.04"]
    setup = ["source /path/to/venv/bin/activate"]   # shell lines run before the worker
    python = "python"               # interpreter inside the job
    poll_seconds = 10

    [slurm.env]
    VLLM_ROCM_USE_SKINNY_GEMM = "0"

The run directory (`--out`) must be on a file system the compute node shares with the login node.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..errors import ConfigError, Dsv4Error
from .launchers import JobOutcome, JobSpec, SchedulerState

TERMINAL_STATES = {
    "COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
}
PY_EXIT_FILE = "py_exit"
KNOWN_KEYS = {
    "partition", "gres", "gpus", "nodes", "cpus_per_task", "mem", "time", "account", "qos",
    "extra_sbatch", "module_purge", "modules", "setup", "python", "poll_seconds", "env",
    "follow_timeout_s",
}


@dataclass
class SlurmConfig:
    partition: str | None = None
    gres: str | None = None
    gpus: int | None = None
    nodes: int = 1
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str = "02:00:00"
    account: str | None = None
    qos: str | None = None
    extra_sbatch: list[str] = field(default_factory=list)
    module_purge: bool = False
    modules: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    python: str = "python"
    poll_seconds: float = 10.0
    env: dict[str, str] = field(default_factory=dict)
    # How long to follow a job after submission before giving up (pending time included).
    follow_timeout_s: float = 6 * 3600.0

    @classmethod
    def from_dict(cls, d: dict, where: str = "slurm config") -> "SlurmConfig":
        unknown = set(d) - KNOWN_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown [slurm] keys {sorted(unknown)}", hint=f"known: {sorted(KNOWN_KEYS)}")
        d = dict(d)
        d["env"] = {str(k): str(v) for k, v in d.get("env", {}).items()}
        d["time"] = str(d.get("time", "02:00:00"))
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> "SlurmConfig":
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: slurm config not found") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: {e}") from None
        if "slurm" not in data:
            raise ConfigError(f"{path}: no [slurm] table")
        return cls.from_dict(data["slurm"], str(path))


def render_script(spec: JobSpec, cfg: SlurmConfig, pythonpath: Path | None = None) -> str:
    opts = [f"--job-name={spec.name}", f"--nodes={cfg.nodes}", f"--time={cfg.time}",
            f"--output={spec.workdir / 'slurm-%j.out'}", f"--chdir={spec.workdir}"]
    for key, flag in (("partition", "partition"), ("gres", "gres"), ("gpus", "gpus"),
                      ("cpus_per_task", "cpus-per-task"), ("mem", "mem"), ("account", "account"), ("qos", "qos")):
        value = getattr(cfg, key)
        if value not in (None, ""):
            opts.append(f"--{flag}={value}")
    lines = ["#!/bin/bash"] + [f"#SBATCH {o}" for o in opts] + [f"#SBATCH {o}" for o in cfg.extra_sbatch]
    lines += ["", "# Written by dsv4-patch e2e. The Python exit code is saved separately from the",
              "# scheduler's state on purpose: a COMPLETED job can still hide a failed run.", "set -u"]
    if cfg.module_purge:
        lines.append("module purge")
    lines += [f"module load {shlex.quote(m)}" for m in cfg.modules]
    lines += list(cfg.setup)
    env = dict(cfg.env)
    env.update(spec.env)
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    if pythonpath is not None:
        lines.append(f'export PYTHONPATH={shlex.quote(str(pythonpath))}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    raw = shlex.quote(str(spec.log_path))
    lines += [
        f"cd {shlex.quote(str(spec.workdir))}",
        f"RAW={raw}",
        f"rm -f {shlex.quote(PY_EXIT_FILE)}",
        " ".join(shlex.quote(a) for a in spec.argv) + ' > "$RAW" 2>&1',
        "rc=$?",
        'echo "PY_EXIT=$rc"',
        f'echo "$rc" > {shlex.quote(PY_EXIT_FILE)}',
        'exit "$rc"',
        "",
    ]
    return "\n".join(lines)


def _run(cmd: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise Dsv4Error(f"{cmd[0]}: not found", hint="run on a Slurm login node or use --launcher local") from None


def _split_exit(text: str) -> tuple[int | None, int | None]:
    m = re.match(r"^(\d+):(\d+)$", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job -o ID` prints Key=Value pairs on one line; values may not contain spaces
    except for a few (Command, WorkDir...) which we do not need."""
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))


def parse_sacct(text: str) -> list[dict[str, str]]:
    rows = []
    for line in text.strip().splitlines():
        parts = line.split("|")
        if len(parts) >= 4:
            rows.append({"JobID": parts[0], "State": parts[1].split()[0], "ExitCode": parts[2], "Elapsed": parts[3]})
    return rows


class SlurmLauncher:
    name = "slurm"

    def __init__(self, cfg: SlurmConfig, pythonpath: Path | None = None):
        self.cfg = cfg
        self.pythonpath = pythonpath

    # --- submission
    def submit(self, spec: JobSpec) -> str:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        script = spec.workdir / "job.sbatch"
        script.write_text(render_script(spec, self.cfg, self.pythonpath), encoding="utf-8")
        p = _run(["sbatch", "--parsable", str(script)])
        if p.returncode != 0:
            raise Dsv4Error(f"sbatch failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}",
                            hint=f"check the [slurm] config; the script is {script}")
        job_id = p.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise Dsv4Error(f"sbatch printed {p.stdout.strip()!r}, not a job id")
        return job_id

    # --- following
    def state(self, job_id: str) -> SchedulerState | None:
        """The scheduler's view of a job: sacct when accounting works, else scontrol."""
        p = _run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,State,ExitCode,Elapsed"])
        rows = parse_sacct(p.stdout) if p.returncode == 0 else []
        main = next((r for r in rows if r["JobID"] == job_id), None)
        if main is not None:
            code, sig = _split_exit(main["ExitCode"])
            return SchedulerState(job_id, main["State"], code, sig, "sacct", steps=rows)
        p = _run(["scontrol", "show", "job", "-o", job_id])
        if p.returncode != 0:
            return None
        kv = parse_scontrol(p.stdout)
        if "JobState" not in kv:
            return None
        code, sig = _split_exit(kv.get("ExitCode", ""))
        return SchedulerState(job_id, kv["JobState"], code, sig, "scontrol", reason=kv.get("Reason"))

    def wait(self, job_id: str, spec: JobSpec, started: float | None = None) -> JobOutcome:
        started = time.monotonic() if started is None else started
        deadline = started + self.cfg.follow_timeout_s
        notes: list[str] = []
        st = None
        while True:
            st = self.state(job_id)
            if st is not None and st.state in TERMINAL_STATES:
                break
            if time.monotonic() > deadline:
                _run(["scancel", job_id])
                notes.append(f"gave up following job {job_id} after {self.cfg.follow_timeout_s:g} s and cancelled it")
                st = self.state(job_id)
                break
            time.sleep(self.cfg.poll_seconds)
        # sacct can show the job COMPLETED a moment before the step rows settle; one more read is cheap.
        if st is not None and st.source == "sacct":
            st = self.state(job_id) or st
        exit_code = _read_py_exit(spec.workdir)
        if exit_code is None:
            notes.append("the job script never saved PY_EXIT (killed before Python returned)")
        return JobOutcome(
            self.name, exit_code, None, False, 0.0, spec.log_path, spec.result_path,
            time.monotonic() - started, scheduler=st, job_id=job_id, notes=notes,
        )

    def run(self, spec: JobSpec) -> JobOutcome:
        started = time.monotonic()
        return self.wait(self.submit(spec), spec, started)


def _read_py_exit(workdir: Path) -> int | None:
    try:
        return int((workdir / PY_EXIT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
