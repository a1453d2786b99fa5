"""Log reading: the two known noise messages versus real first blockers (docs/background.md,
"Reading a raw log")."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4_patch.e2e.logscan import scan_log, split_prefix

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def _scan(name: str):
    return scan_log((LOGS / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "log, summary, stage",
    [
        # J01: the usage-report thread fails first, the engine core's Triton lowering is the cause.
        ("j01_passmanager.log", "RuntimeError: PassManager::run failed", "engine init (the real test)"),
        # J02-J05: the DTK Triton softmax API gap
        ("j02_softmax.log", "triton.compiler.errors.CompilationError: at 45:12:", "engine init (the real test)"),
        # J12: the real assertion, not the usage noise before it nor the wrapper after it.
        ("j12_kv_auto.log", "AssertionError: DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got auto",
         "engine init (the real test)"),
    ],
)
def test_first_blocker_is_the_earliest_real_traceback(log, summary, stage):
    scan = _scan(log)
    blocker = scan.first_blocker()
    assert blocker is not None and blocker.summary == summary
    assert blocker.stage == stage


def test_j06_first_blocker_is_the_device_assertion_not_the_later_engine_errors():
    scan = _scan("j06_skinny_vmfault.log")
    blocker = scan.first_blocker()
    assert blocker.kind == "device_fault" and "skinny_gemms.hip:580" in blocker.summary
    assert blocker.process.startswith("(VllmWorker TP3 pid=7003)")
    kinds = [e.summary.split(":")[0] for e in scan.device_faults]
    assert kinds == ["device-side assertion", "HSA runtime error", "GPU memory access fault"]
    assert scan.engine_ready_s == 335.4 and scan.last_stage == "generate"


@pytest.mark.parametrize("log", ["j08_completed_degraded.log", "j17_coherent.log"])
def test_usage_thread_and_libcudart_shutdown_are_noise_not_blockers(log):
    scan = _scan(log)
    assert scan.first_blocker() is None
    tracebacks = [e for e in scan.events if e.kind == "traceback"]
    assert len(tracebacks) == 2 and all(e.noise for e in tracebacks)
    assert "usage-report" in tracebacks[0].noise and tracebacks[0].thread == "Thread-1 (_report_usage_worker)"
    assert "libcudart" in tracebacks[1].noise and tracebacks[1].after_results
    assert scan.py_exit == 0


def test_j08_log_records_what_the_weak_probe_printed():
    scan = _scan("j08_completed_degraded.log")
    assert scan.printed_verdict == "COHERENT"  # printed; the judge re-checks the tokens (test_e2e_judge)


def test_j15_nan_diagnostics_are_found_and_true_values_are_not():
    scan = _scan("j15_nan.log")
    assert [e.summary for e in scan.nan_diagnostics] == ["nope_finite = False", "logits_finite = False",
                                                         "probs_finite = False"]
    assert _scan("j17_coherent.log").nan_diagnostics == []


def test_libcudart_before_results_is_still_noise_and_a_real_error_after_it_wins():
    text = "\n".join([
        "### STAGE: engine_init",
        "Traceback (most recent call last):",
        '  File "cumem.py", line 60, in find_loaded_library',
        "AssertionError: libcudart is not loaded in the current process, try setting VLLM_CUDART_SO_PATH",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ValueError: real problem",
    ])
    blocker = scan_log(text).first_blocker()
    assert blocker.summary == "ValueError: real problem" and blocker.line == 5


def test_an_error_after_results_is_reported_only_when_nothing_else_exists():
    text = "\n".join([
        "### STAGE: generate", "DSV4_VERDICT: COHERENT",
        "Traceback (most recent call last):", '  File "x.py", line 1, in f', "OSError: shutdown trouble",
    ])
    blocker = scan_log(text).first_blocker()
    assert blocker.after_results and blocker.summary == "OSError: shutdown trouble"


def test_interleaved_process_lines_do_not_break_a_traceback():
    text = "\n".join([
        "(EngineCore_DP0 pid=1) Traceback (most recent call last):",
        "(VllmWorker TP1 pid=3) INFO loading shard 3/48",
        '(EngineCore_DP0 pid=1)   File "core.py", line 10, in run',
        "(VllmWorker TP1 pid=3) INFO loading shard 4/48",
        "(EngineCore_DP0 pid=1) KeyError: 'layers.3.attn'",
    ])
    [event] = scan_log(text).events
    assert event.summary == "KeyError: 'layers.3.attn'" and event.process.strip() == "(EngineCore_DP0 pid=1)"


def test_split_prefix_handles_vllm_and_torchrun_prefixes():
    assert split_prefix("(VllmWorker rank=0 pid=12) hello") == ("(VllmWorker rank=0 pid=12) ", "hello")
    assert split_prefix("[rank3]: Traceback") == ("[rank3]: ", "Traceback")
    assert split_prefix("plain line") == ("", "plain line")
