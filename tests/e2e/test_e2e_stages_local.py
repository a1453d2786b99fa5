"""The stage runner and the local launcher against the scripted fake engine (fake_engine_double.py):
real processes, real exit codes, real time limits."""

from __future__ import annotations

import json
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from dsv4_patch.e2e.api import E2EOptions, run_e2e
from dsv4_patch.e2e.launchers import LocalLauncher
from dsv4_patch.e2e.protocol import RESULT_SCHEMA, RequestSpec, WorkerRequest
from dsv4_patch.e2e.stages import run_cases
from dsv4_patch.e2e.verdict import Verdict

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, prefix, scenario, suite="chat32", timeout_s=60.0, **kw):
    opts = E2EOptions(engine="vllm", model="/models/fake", suite=suite, out=tmp_path, root=ROOT,
                      worker_prefix=prefix, timeout_s=timeout_s, env={"FAKE_ENGINE_SCENARIO": scenario}, **kw)
    return run_e2e(opts)


def test_coherent_run_writes_all_stages_and_reports(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "coherent")
    [case] = r.report.cases
    assert r.report.verdict is Verdict.COHERENT and r.ok
    assert [s["name"] for s in case.result["stages"]] == ["env", "config", "import", "engine_init", "generate"]
    assert case.outcome.exit_code == 0 and case.generations()[0]["token_texts"][1] == "你好"
    assert "### STAGE: done" in case.outcome.log_text()
    assert json.loads(r.json_path.read_text())["verdict"] == "COHERENT"
    assert ET.fromstring(r.junit_path.read_text().split("?>", 1)[1]).get("failures") == "0"


def test_weak_probe_exit_0_with_j08_tokens_is_degraded(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "j08-weak-probe")
    [case] = r.report.cases
    assert case.outcome.exit_code == 0  # the process said "fine"
    assert case.result["generations"][0]["token_ids"][:3] == [32, 0, 0]
    assert r.report.verdict is Verdict.DEGRADED and not r.ok
    junit = ET.fromstring(r.junit_path.read_text().split("?>", 1)[1])
    assert junit.get("failures") == "2"  # the run and its one generation


def test_python_failure_in_engine_init_is_an_error_with_the_stage(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "python-fails")
    [case] = r.report.cases
    assert case.outcome.exit_code == 1 and r.report.verdict is Verdict.ERROR
    assert case.judgement.stage_reached == "engine_init"
    assert "fp8_ds_mla layout only supports fp8 kv-cache" in case.judgement.first_blocker


def test_hung_engine_is_stopped_at_the_time_limit_and_crashes(tmp_path, fake_worker_prefix, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE_SLEEP", "120")
    t0 = time.monotonic()
    r = _run(tmp_path, fake_worker_prefix, "hang", timeout_s=3.0)
    assert time.monotonic() - t0 < 30
    [case] = r.report.cases
    assert case.outcome.timed_out and r.report.verdict is Verdict.CRASHED
    assert case.judgement.stage_reached == "engine_init (did not finish)"
    assert any("stage engine_init never finished" in x for x in case.judgement.reasons)


def test_segfault_during_generate_is_a_crash(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "segfault")
    [case] = r.report.cases
    assert case.outcome.signal == 11 and r.report.verdict is Verdict.CRASHED
    assert case.judgement.stage_reached == "generate (did not finish)"


def test_device_fault_line_is_the_first_blocker(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "device-fault")
    [case] = r.report.cases
    assert r.report.verdict is Verdict.CRASHED
    assert case.judgement.first_blocker.startswith("GPU memory access fault") and "'generate'" in case.judgement.first_blocker


def test_noise_from_usage_thread_and_shutdown_does_not_fail_a_coherent_run(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "noise-coherent")
    [case] = r.report.cases
    assert r.report.verdict is Verdict.COHERENT
    assert len(case.scan.noise) == 2 and case.judgement.first_blocker is None


def test_nan_logprob_is_degraded_when_the_suite_checks_finiteness(tmp_path, fake_worker_prefix):
    suite = tmp_path / "finite.toml"
    suite.write_text('name = "finite"\ndescription = "d"\ncheck_finite = true\nrepeat = 2\n'
                     '[[requests]]\nid = "a"\nturns = ["hi"]\n', encoding="utf-8")
    r = _run(tmp_path / "out", fake_worker_prefix, "nan", suite=str(suite))
    [case] = r.report.cases
    assert [g["label"] for g in case.generations()] == ["a#1", "a#2"]
    assert r.report.verdict is Verdict.DEGRADED and "nan:" in case.judgement.reasons[0]


def test_boundary_prompt_missing_its_target_length_is_an_error(tmp_path, fake_worker_prefix):
    ok = _run(tmp_path / "ok", fake_worker_prefix, "coherent", suite="block-boundary")
    gens = ok.report.cases[0].generations()
    assert [g["prompt_tokens"] for g in gens] == [63, 64, 65, 127, 128, 129] and ok.report.ok
    bad = _run(tmp_path / "bad", fake_worker_prefix, "short-prompt", suite="block-boundary")
    assert bad.report.verdict is Verdict.ERROR
    assert "the boundary it tests was not exercised" in bad.report.cases[0].judgement.reasons[0]


def test_two_turn_suite_feeds_the_first_answer_back(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "coherent", suite="two-turns")
    gens = r.report.cases[0].generations()
    assert [g["label"] for g in gens] == ["zh-dialogue/turn1", "zh-dialogue/turn2"]
    # the second prompt holds both user turns and the first answer: it is longer than the first
    assert gens[1]["prompt_tokens"] > gens[0]["prompt_tokens"] + len(gens[0]["text"])


def test_variants_run_as_separate_cases_and_are_compared(tmp_path, fake_worker_prefix):
    r = _run(tmp_path, fake_worker_prefix, "coherent", suite="prefix-caching-ab")
    assert [c.case for c in r.report.cases] == ["prefix-caching-on", "prefix-caching-off"]
    assert r.report.cases[0].request.engine_args == {"enable_prefix_caching": True}
    assert r.report.comparison == [] and r.report.ok


def test_stale_result_files_are_removed_before_a_run(tmp_path, fake_worker_prefix):
    req = WorkerRequest(engine="vllm", model="/m", tp=1, case="c", requests=[RequestSpec("a", ["hi"])])
    stale = tmp_path / "s" / "c" / "result.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"schema": RESULT_SCHEMA, "stages": [], "generations": []}))
    [run] = run_cases([req], "s", LocalLauncher(), tmp_path, [fake_worker_prefix[0], "-c", "raise SystemExit(0)"], 30)
    assert run.result is None and run.judgement.verdict is Verdict.ERROR


def test_max_tokens_below_two_is_refused(tmp_path, fake_worker_prefix):
    from dsv4_patch.errors import UsageError

    with pytest.raises(UsageError, match="prefill"):
        _run(tmp_path, fake_worker_prefix, "coherent", max_tokens=1)
