"""run_e2e(): one suite, every variant, judged, written as JSON + JUnit + summary, optionally recorded."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..config import load_project
from ..errors import ConfigError, UsageError
from .launchers import LocalLauncher
from .record import make_result, write_result
from .results import SuiteReport, compare_variants, summary_lines, to_junit_xml
from .slurm import SlurmConfig, SlurmLauncher
from .stages import run_cases, worker_command
from .suites import load_suite

ENGINES = ("vllm", "sglang")
LAUNCHERS = ("local", "slurm")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout holding dsv4_patch/, for PYTHONPATH


@dataclass
class E2EOptions:
    engine: str
    model: str
    tp: int = 1
    suite: str = "chat32"
    launcher: str = "local"
    slurm_config: Path | None = None
    out: Path = Path("build/e2e")
    record: bool = False
    hardware: str | None = None  # overrides what the worker detected, for --record
    max_tokens: int | None = None  # overrides the suite (never below 2)
    timeout_s: float | None = None  # local launcher; overrides the suite
    root: Path | None = None
    worker_prefix: list[str] | None = None  # replaces `python -m dsv4_patch.e2e.worker` (tests)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class E2EResult:
    report: SuiteReport
    json_path: Path
    junit_path: Path
    summary_path: Path
    recorded: Path | None = None
    record_refused: str | None = None

    @property
    def ok(self) -> bool:
        return self.report.ok and self.record_refused is None


def _check(opts: E2EOptions) -> None:
    if opts.engine not in ENGINES:
        raise UsageError(f"--engine {opts.engine!r}: use {' or '.join(ENGINES)}")
    if opts.launcher not in LAUNCHERS:
        raise UsageError(f"--launcher {opts.launcher!r}: use {' or '.join(LAUNCHERS)}")
    if opts.tp < 1:
        raise UsageError(f"--tp {opts.tp}: must be at least 1")
    if opts.launcher == "slurm" and opts.slurm_config is None:
        raise UsageError("--launcher slurm needs --slurm-config FILE", hint="see docs/e2e.md for the [slurm] table")
    if not opts.model:
        raise UsageError("--model PATH is required")
    if opts.launcher == "local" and opts.worker_prefix is None and not Path(opts.model).is_dir():
        # checked here: the worker would fail later on whatever it imports first (torch)
        raise UsageError(f"--model {opts.model}: no such directory here",
                         hint="pass the local checkpoint directory (config.json and the weights)")


def run_e2e(opts: E2EOptions) -> E2EResult:
    _check(opts)
    root = Path(opts.root or PACKAGE_ROOT).resolve()
    suite = load_suite(root, opts.suite)
    requests = suite.worker_requests(opts.engine, opts.model, opts.tp, opts.max_tokens)
    out = Path(opts.out).resolve()
    timeout = opts.timeout_s or suite.timeout_s
    if opts.launcher == "slurm":
        cfg = SlurmConfig.load(opts.slurm_config)
        launcher = SlurmLauncher(cfg, pythonpath=PACKAGE_ROOT)
        prefix = opts.worker_prefix or worker_command(cfg.python)
    else:
        launcher = LocalLauncher()
        prefix = opts.worker_prefix or worker_command(sys.executable)
    env = dict(opts.env)
    if opts.launcher == "local":
        env.setdefault("PYTHONPATH", str(PACKAGE_ROOT))
    cases = run_cases(requests, suite.name, launcher, out, prefix, timeout, env)
    comparison = compare_variants(cases, suite.compare_tokens) if suite.compare_tokens else []
    report = SuiteReport(suite.name, suite.description, cases, comparison)
    base = out / suite.name
    json_path, junit_path, summary_path = base / "report.json", base / "junit.xml", base / "summary.txt"
    json_path.write_text(report.to_json(), encoding="utf-8")
    junit_path.write_text(to_junit_xml(report), encoding="utf-8")
    summary_path.write_text("\n".join(summary_lines(report)) + "\n", encoding="utf-8")
    result = E2EResult(report, json_path, junit_path, summary_path)
    if opts.record:
        try:
            result.recorded = record_report(root, opts, report)
        except ConfigError as e:
            result.record_refused = e.one_line()
    return result


def record_report(root: Path, opts: E2EOptions, report: SuiteReport) -> Path:
    """Write a hardware-level result file for the engine's stack, passed or failed."""
    hardware = opts.hardware or report.hardware()
    if not hardware:
        raise ConfigError("cannot tell which hardware ran this (the env stage did not finish)",
                          hint="pass --hardware gfx936|B200 to record anyway")
    project = load_project(root)
    stack = project.stack(opts.engine)
    first = next((c for c in report.cases if c.generations()), None)
    gen = first.generations()[0] if first else {}
    evidence = {
        "suite": report.suite,
        "verdict": report.verdict.value,
        "engine": opts.engine,
        "engine_version": next((c.result.get("engine_version") for c in report.cases if c.result), None),
        "model": Path(opts.model).name,
        "tp": opts.tp,
        "launcher": opts.launcher,
        "job_ids": [c.outcome.job_id for c in report.cases if c.outcome.job_id],
        "reasons": [r for c in report.cases for r in c.judgement.reasons][:20],
        "first_tokens": gen.get("token_ids", [])[:32],
        "text": gen.get("text", "")[:500],
    }
    data = make_result(
        stack.name, stack.patch_dir, "hardware", hardware, report.ok, evidence, upstream_commit=stack.commit,
        pin=stack.commit, by="dsv4-patch e2e --record",
        note="The harness cannot see which patches the engine was built from: recording states that the "
             "engine was built from this checkout's stack.",
    )
    return write_result(stack.patch_dir, data)
