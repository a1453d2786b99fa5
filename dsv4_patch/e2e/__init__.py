"""End-to-end acceptance harness: run the patched engine on real hardware and judge it stage by stage.

Modules (none prints or knows about Typer):
    verdict    token-level rules and the Verdict enum (COHERENT / DEGRADED / ERROR / CRASHED)
    logscan    raw-log reading: device faults, tracebacks, noise, the first blocker
    judge      one run judged from the result file, exit code, scheduler state and log together
    protocol   request/result files and exit codes shared with the worker
    worker     `python -m dsv4_patch.e2e.worker`: the script that runs inside the job
    launchers  local subprocess launcher; slurm: sbatch/sacct/scontrol launcher
    stages     the stage runner: prepare a case, launch it, judge it
    suites     declarative suites in e2e/suites/*.toml
    results    reports: JSON, JUnit XML, human summary
    record     result files for the verification matrix (patches/<stack>/results/*.json)
    matrix     which levels each patch has passed, on which hardware
    api        run_e2e(): what the CLI calls

The package __init__ imports nothing so the worker stays importable inside a bare engine environment.
"""
