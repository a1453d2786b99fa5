"""No green without evidence (issue 26) at the commands other than bump: `status --check` exits 4
when a patch's intent tests give no evidence at the pin; `regress` keeps exit 0 for tests that skip
(a CPU run's GPU tests) unless --require-verified, which exits 4 as bump and the scheduled CI do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bumpkit import edit
from synth import numbered

TOOL = Path(__file__).resolve().parents[2] / "tools" / "applypatch.py"

TESTS = '''
import os
from pathlib import Path

import pytest


def test_tagged():
    assert "line 20 p1" in (Path(os.environ["DSV4_TREE_DEMO"]) / "src/a.py").read_text()


def test_gpu_only():
    pytest.skip("needs an NVIDIA GPU")
'''


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True, text=True,
                          env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)}, timeout=300)


def _stack(env, test: str) -> None:
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_p.py").write_text(TESTS)
    env.author({"src/a.py": edit(numbered(60), "line 20\n", "line 20 p1\n")}, "[DSV4] p1",
               body=f"Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_p.py::{test}\n")


def test_status_check_is_unverified_when_an_intent_test_only_skips(benv):
    _stack(benv, "test_gpu_only")
    p = cli(benv, "status", "demo", "--check", "--json")
    [row] = json.loads(p.stdout)
    assert row["applies"] == {"ok": True} and row["unverified"] == {"p1.patch": "untestable (tests/test_p.py::"
                                                                    "test_gpu_only: Skipped: needs an NVIDIA GPU)"}
    assert p.returncode == 4, p.stderr
    p = cli(benv, "status", "demo", "--check")
    assert p.returncode == 4 and "unverified: p1.patch: untestable" in p.stdout, p.stdout + p.stderr
    p = cli(benv, "status", "demo", "--check", "--no-semantic")  # applying only, and it says so
    assert p.returncode == 0 and "not verified: intent tests not run (--no-semantic)" in p.stdout, p.stdout


def test_status_check_passes_when_every_intent_test_fails_at_the_pin(benv):
    _stack(benv, "test_tagged")
    p = cli(benv, "status", "demo", "--check", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)[0]["unverified"] == {}, p.stdout + p.stderr


def test_regress_skips_are_not_a_failure_unless_evidence_is_required(benv):
    _stack(benv, "test_gpu_only")
    p = cli(benv, "regress", "demo", "--json")
    rep = json.loads(p.stdout)
    assert p.returncode == 0 and rep["ok"] and not rep["verified"]
    assert rep["unverified"] == {"demo/p1.patch": "not-verified: needs an NVIDIA GPU"}
    p = cli(benv, "regress", "demo", "--require-verified")
    assert p.returncode == 4 and "unverified: demo/p1.patch (not-verified: needs an NVIDIA GPU)" in p.stderr, p.stderr


def test_bump_report_is_written_where_it_says(benv, tmp_path):
    _stack(benv, "test_tagged")
    benv.up.write("src/b.txt", "top\n" + numbered(30, "b"))
    new = benv.up.commit("v2")
    where = tmp_path / "cwd"
    where.mkdir()
    p = subprocess.run([sys.executable, str(TOOL), "bump", "demo", new, "--no-semantic", "--report", "reports/r.md",
                        "--project", str(benv.root)], cwd=where, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(benv.cache.root)})
    assert p.returncode == 4, p.stdout + p.stderr  # applied and regress passed, but no intent test ran
    md, js = where / "reports/r.md", where / "reports/r.json"
    assert md.read_text().startswith("# Bump demo") and json.loads(js.read_text())["result"] == "unverified"
    assert "report: reports/r.md and reports/r.json" in p.stderr, p.stderr
    assert "intent tests not run (--no-semantic)" in md.read_text()
