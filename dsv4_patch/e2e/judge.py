"""Judge one run from three independent signals (docs/background.md, "Judging a run").

1. the worker's result file: stages, token ids, per-token texts, finish reasons, text;
2. the Python exit code (the job script saves it: PY_EXIT) and, under Slurm, the scheduler's own job
   state and exit code;
3. the raw log: device faults, NaN diagnostics, tracebacks and the first blocker.

A COMPLETED 0:0 job whose Python failed, or whose tokens are degraded, is a failure (J08).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .launchers import JobOutcome
from .logscan import LogScan
from .protocol import STAGES, WORKER_DEGRADED
from .verdict import (
    Generation,
    GenerationJudgement,
    SpecialTokens,
    TokenRules,
    Verdict,
    judge_generation,
)

# Scheduler states that mean the job was stopped from outside or the node went away.
CRASH_STATES = {"TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
OK_STATES = {"COMPLETED"}


@dataclass
class RunJudgement:
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    first_blocker: str | None = None
    stage_reached: str | None = None
    generations: list[GenerationJudgement] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict.value,
            "reasons": self.reasons,
            "first_blocker": self.first_blocker,
            "stage_reached": self.stage_reached,
            "generations": [g.to_dict() for g in self.generations],
        }


def _special(result: dict | None) -> SpecialTokens:
    s = (result or {}).get("special_token_ids") or {}
    return SpecialTokens(bos_id=s.get("bos"), eos_id=s.get("eos"), pad_id=s.get("pad"))


def _failed_stage(result: dict | None) -> dict | None:
    for st in (result or {}).get("stages", []):
        if st.get("status") == "failed":
            return st
    return None


def _stage_reached(result: dict | None, scan: LogScan) -> str | None:
    stages = (result or {}).get("stages", [])
    if stages:
        last = stages[-1]
        return last["name"] + (" (did not finish)" if last.get("status") == "running" else "")
    return scan.last_stage


def judge_run(
    outcome: JobOutcome,
    result: dict | None,
    result_problem: str | None,
    scan: LogScan,
    rules: TokenRules = TokenRules(),
) -> RunJudgement:
    crashed: list[str] = []
    errors: list[str] = []
    degraded: list[str] = []

    gens = [Generation.from_dict(g) for g in (result or {}).get("generations", [])]
    judged = [judge_generation(g, _special(result), rules) for g in gens]
    for g, j in zip(gens, judged):
        if j.verdict is not Verdict.COHERENT:
            degraded.append(f"{g.label}: " + "; ".join(str(r) for r in j.reasons))
        if g.target_prompt_tokens is not None and g.prompt_tokens != g.target_prompt_tokens:
            errors.append(
                f"{g.label}: prompt has {g.prompt_tokens} tokens, the suite asked for {g.target_prompt_tokens}: "
                "the boundary it tests was not exercised"
            )

    # --- the process and the scheduler
    if outcome.timed_out:
        crashed.append(f"the harness stopped the run after its time limit ({outcome.timeout_s:g} s)")
    if outcome.signal is not None:
        crashed.append(f"the worker was killed by signal {outcome.signal}")
    elif outcome.exit_code is not None and outcome.exit_code >= 128:
        # A shell (the Slurm job script) reports a child killed by signal N as 128 + N.
        crashed.append(f"the worker exited {outcome.exit_code} (killed by signal {outcome.exit_code - 128})")
    sched = outcome.scheduler
    if sched is not None:
        if sched.state in CRASH_STATES:
            crashed.append(f"scheduler: job {sched.job_id} {sched.state} (exit {sched.exit_text})")
        elif sched.state not in OK_STATES:
            errors.append(f"scheduler: job {sched.job_id} {sched.state} (exit {sched.exit_text})")
        if sched.state in OK_STATES and outcome.exit_code not in (0, None):
            errors.append(f"scheduler says COMPLETED but Python exited {outcome.exit_code}")
        if sched.exit_code is not None and outcome.exit_code is not None and sched.exit_code != outcome.exit_code:
            errors.append(f"scheduler exit code {sched.exit_code} differs from the saved PY_EXIT {outcome.exit_code}")
    if outcome.exit_code is None and not crashed:
        errors.append("the worker's exit code was not recorded (PY_EXIT missing)")

    for ev in scan.device_faults:
        crashed.append(f"device fault: {ev.describe()}")
    for ev in scan.nan_diagnostics:
        degraded.append(f"NaN diagnostic in the log: {ev.describe()}")

    # --- the worker's own account
    failed = _failed_stage(result)
    if failed:
        err = failed.get("error") or {}
        errors.append(f"stage {failed['name']} failed: {err.get('type', '?')}: {err.get('message', '')}".strip())
    if result is None:
        (crashed if crashed else errors).append(result_problem or "no result")
    elif not failed:
        unfinished = [st["name"] for st in result.get("stages", []) if st.get("status") == "running"]
        missing = [s for s in STAGES if s not in {st.get("name") for st in result.get("stages", [])}]
        if unfinished:
            # The worker rewrites result.json after every stage: "running" means it died inside it.
            (crashed if crashed else errors).append(f"stage {unfinished[0]} never finished")
        elif missing:
            errors.append(f"stages never reported: {', '.join(missing)}")
        elif not gens:
            errors.append("generation finished without any output to judge")
    if outcome.exit_code not in (0, None) and not failed and not crashed:
        if outcome.exit_code == WORKER_DEGRADED and degraded:
            pass  # the worker agreed with us: degraded output, exit 2
        elif outcome.exit_code == WORKER_DEGRADED:
            errors.append("the worker exited 2 (degraded) but its recorded tokens pass every check")
        else:
            errors.append(f"the worker exited {outcome.exit_code}")

    if crashed:
        verdict = Verdict.CRASHED
    elif errors:
        verdict = Verdict.ERROR
    elif degraded:
        verdict = Verdict.DEGRADED
    else:
        verdict = Verdict.COHERENT
    reasons = crashed + errors + degraded
    blocker = scan.first_blocker()
    if blocker is not None:
        first = blocker.describe()
    elif degraded:
        first = f"degraded output: {degraded[0]}"
    elif reasons:
        first = reasons[0]
    else:
        first = None
    return RunJudgement(verdict, reasons, first, _stage_reached(result, scan), judged)
