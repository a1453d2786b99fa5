"""The checks' fork server (_vllm_venvs.py): a forked check gives the answer a fresh interpreter
gives -- the skinny-GEMM check, which sets up ROCm (a stand-in amdsmi) before vLLM resolves its
platform, run both ways in the pristine venv, where its sub-checks fail with tracebacks that must
match too -- and one server serves every test of a venv, whatever pytest's per-test variable says."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import _vllm_venvs as V

CHECKS = Path(__file__).resolve().parent / "checks"


def _result(r) -> dict:
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("DSV4-CHECK ")]
    assert lines, f"no result (rc {r.returncode}):\n{r.stderr[-3000:]}"
    return json.loads(lines[-1][len("DSV4-CHECK "):])


def test_a_forked_check_answers_as_a_fresh_interpreter(vllm_venvs, dsv4_tree, monkeypatch):
    monkeypatch.delenv(V.FORKSERVER_ENV, raising=False)
    env = V.check_env({"DSV4_TREE_VLLM": str(dsv4_tree("vllm"))}, [CHECKS])
    script = CHECKS / "skinny_gemm_gate.py"
    fresh = _result(V.run_in_venv(vllm_venvs[False], script, pythonpath=[CHECKS], env=env, fork=False))
    forked_run = V.run_in_venv(vllm_venvs[False], script, pythonpath=[CHECKS], env=env)
    key, server = V._fork_server(str(V.venv_python(vllm_venvs[False])), env)
    assert server is not None, "the fork server did not start: nothing was compared"
    assert list(V._servers[key]["logs"].glob("run-*.out")), "the check did not run as the server's child"
    forked = _result(forked_run)
    assert any(not r["ok"] for r in fresh.values()), "the pristine tree should fail some sub-checks"
    assert forked == fresh


def test_one_server_serves_every_test_of_a_venv(monkeypatch):
    """pytest sets PYTEST_CURRENT_TEST per test and phase; the checks' DSV4_ variables are theirs.
    Neither may cost a new server; any other variable (a preloaded module may read it) must."""
    monkeypatch.delenv(V.FORKSERVER_ENV, raising=False)
    base = {k: v for k, v in os.environ.items() if not k.startswith(V.FREE_PREFIXES)}
    try:
        k1, s1 = V._fork_server(sys.executable, {**base, "PYTEST_CURRENT_TEST": "a (call)", "DSV4_TREE_VLLM": "/x"})
        k2, s2 = V._fork_server(sys.executable, {**base, "PYTEST_CURRENT_TEST": "b (setup)", "DSV4_TREE_VLLM": "/y"})
        assert s1 is not None and s1 is s2 and k1 == k2
        k3, s3 = V._fork_server(sys.executable, {**base, "VLLM_ROCM_USE_SKINNY_GEMM": "0"})
        assert k3 != k1 and s3 is not s1
    finally:
        V.close_servers()
    assert not V._servers
