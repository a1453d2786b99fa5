"""Run-level judgement from the three signals: result file, exit code/scheduler, raw log."""

from __future__ import annotations

from pathlib import Path

from dsv4_patch.e2e.judge import judge_run
from dsv4_patch.e2e.launchers import JobOutcome, SchedulerState
from dsv4_patch.e2e.logscan import scan_log
from dsv4_patch.e2e.protocol import RESULT_SCHEMA, STAGES
from dsv4_patch.e2e.verdict import Verdict

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def _result(ids: list[int], text: str, failed_stage: str | None = None) -> dict:
    stages = []
    for name in STAGES:
        if name == failed_stage:
            stages.append({"name": name, "status": "failed", "error": {"type": "RuntimeError", "message": "boom"}})
            break
        stages.append({"name": name, "status": "ok"})
    gens = [] if failed_stage else [{"label": "zh-intro", "token_ids": ids, "text": text, "finish_reason": "length",
                                     "max_tokens": 32, "ignore_eos": True}]
    return {"schema": RESULT_SCHEMA, "stages": stages, "generations": gens, "special_token_ids": {"bos": 0}}


def _outcome(exit_code, state=None, sched_exit=None, signal=None, timed_out=False) -> JobOutcome:
    sched = None
    if state is not None:
        code, sig = sched_exit
        sched = SchedulerState("17", state, code, sig, "scontrol")
    return JobOutcome("slurm" if sched else "local", exit_code, signal, timed_out, 10.0, Path("raw.log"),
                      Path("result.json"), 1.0, scheduler=sched)


def test_j08_completed_exit0_with_bos_tokens_is_degraded(seed_vectors):
    vec = seed_vectors["vectors"]["J08"]
    scan = scan_log((LOGS / "j08_completed_degraded.log").read_text(encoding="utf-8"))
    j = judge_run(_outcome(0, "COMPLETED", (0, 0)), _result(vec["token_ids"], vec["text"]), None, scan)
    assert j.verdict is Verdict.DEGRADED
    assert j.first_blocker.startswith("degraded output: zh-intro: bos")


def test_j17_completed_exit0_coherent_tokens_is_coherent(seed_vectors):
    vec = seed_vectors["vectors"]["J17"]
    scan = scan_log((LOGS / "j17_coherent.log").read_text(encoding="utf-8"))
    j = judge_run(_outcome(0, "COMPLETED", (0, 0)), _result(vec["token_ids"], vec["text"]), None, scan)
    assert j.verdict is Verdict.COHERENT and j.reasons == [] and j.first_blocker is None


def test_completed_job_whose_python_failed_is_an_error(seed_vectors):
    vec = seed_vectors["vectors"]["J17"]
    j = judge_run(_outcome(1, "COMPLETED", (0, 0)), _result(vec["token_ids"], vec["text"]), None, scan_log(""))
    assert j.verdict is Verdict.ERROR
    assert any("COMPLETED but Python exited 1" in r for r in j.reasons)


def test_timeout_state_is_a_crash_even_with_partial_results(seed_vectors):
    vec = seed_vectors["vectors"]["J17"]
    j = judge_run(_outcome(None, "TIMEOUT", (0, 15)), _result(vec["token_ids"], vec["text"]), None, scan_log(""))
    assert j.verdict is Verdict.CRASHED and "TIMEOUT" in j.reasons[0]


def test_device_fault_in_the_log_is_a_crash_whatever_the_tokens(seed_vectors):
    vec = seed_vectors["vectors"]["J17"]
    scan = scan_log((LOGS / "j06_skinny_vmfault.log").read_text(encoding="utf-8"))
    j = judge_run(_outcome(0), _result(vec["token_ids"], vec["text"]), None, scan)
    assert j.verdict is Verdict.CRASHED and "skinny_gemms.hip:580" in j.first_blocker


def test_nan_diagnostic_in_the_log_degrades_coherent_looking_tokens(seed_vectors):
    vec = seed_vectors["vectors"]["J17"]
    scan = scan_log((LOGS / "j15_nan.log").read_text(encoding="utf-8"))
    j = judge_run(_outcome(0), _result(vec["token_ids"], vec["text"]), None, scan)
    assert j.verdict is Verdict.DEGRADED and any("nope_finite" in r for r in j.reasons)


def test_failed_stage_is_an_error_with_the_log_blocker():
    scan = scan_log((LOGS / "j12_kv_auto.log").read_text(encoding="utf-8"))
    j = judge_run(_outcome(1), _result([], "", failed_stage="engine_init"), None, scan)
    assert j.verdict is Verdict.ERROR and j.stage_reached == "engine_init"
    assert j.first_blocker.startswith("AssertionError: DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache")


def test_worker_exit_2_agreeing_with_degraded_tokens_is_degraded_and_disagreeing_is_error(seed_vectors):
    bad, good = seed_vectors["vectors"]["J11"], seed_vectors["vectors"]["J17"]
    assert judge_run(_outcome(2), _result(bad["token_ids"], bad["text"]), None, scan_log("")).verdict is Verdict.DEGRADED
    assert judge_run(_outcome(2), _result(good["token_ids"], good["text"]), None, scan_log("")).verdict is Verdict.ERROR


def test_shell_reported_signal_exit_code_is_a_crash():
    j = judge_run(_outcome(139, "FAILED", (139, 0)), None, "no result file", scan_log(""))
    assert j.verdict is Verdict.CRASHED and "signal 11" in j.reasons[0]


def test_no_result_and_exit_0_is_an_error_not_a_pass():
    j = judge_run(_outcome(0), None, "no result file at x", scan_log(""))
    assert j.verdict is Verdict.ERROR


def test_scheduler_and_saved_exit_code_disagreeing_is_reported(seed_vectors):
    vec = seed_vectors["vectors"]["J17"]
    j = judge_run(_outcome(0, "FAILED", (3, 0)), _result(vec["token_ids"], vec["text"]), None, scan_log(""))
    assert j.verdict is Verdict.ERROR
    assert any("differs from the saved PY_EXIT 0" in r for r in j.reasons)
