"""A bound test must fail on the unpatched tree (docs/patch-format.md, "A Regression-Test must fail
without its patch"): `check` refuses a binding a recorded result shows passing on the pristine pin
(same pin, same patch bytes, same test code), says nothing where no record can tell; `regress
--record` writes the pristine outcome of each bound id; `status --check` exits 4 when one intent
test passes on the pristine pin although another fails there (`needed`).

Planted projects (tests/engine/synth.py). Deterministic: no randomness."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from bumpkit import edit
from synth import make_project, numbered

from dsv4_patch.config import load_project
from dsv4_patch.lint import lint_stack

TOOL = Path(__file__).resolve().parents[2] / "tools" / "applypatch.py"

TESTS = '''
import os
from pathlib import Path


def test_tagged():
    """Fails without the patch: evidence."""
    assert "line 20 p1" in (Path(os.environ["DSV4_TREE_DEMO"]) / "src/a.py").read_text()


def test_guard():
    """Passes on either tree: no evidence for the patch."""
    assert "line 40" in (Path(os.environ["DSV4_TREE_DEMO"]) / "src/a.py").read_text()
'''
GUARD = "tests/test_p.py::test_guard"
TAGGED = "tests/test_p.py::test_tagged"


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True,
                          text=True, env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)}, timeout=300)


def _stack(env, *tests: str) -> Path:
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_p.py").write_text(TESTS)
    trailers = "".join(f"Regression-Test: {t}\n" for t in tests)
    env.author({"src/a.py": edit(numbered(60), "line 20\n", "line 20 p1\n")}, "[DSV4] p1",
               body=f"Why.\n\nUpstream-Status: Pending\n{trailers}")
    return env.root / "patches/demo/p1.patch"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _record(env, outcomes: dict[str, str], *, patch_sha: str | None = None, pin: str | None = None,
            code: dict | None = None, name: str = "20261203T120000-integration-cpu.json") -> Path:
    """A result file as `regress --record` writes it, with the documented `pristine` block."""
    patch = env.root / "patches/demo/p1.patch"
    tests = env.root / "tests/test_p.py"
    data = {
        "schema": "dsv4-patch-result/1", "stack": "demo", "level": "integration", "hardware": "cpu",
        "status": "passed", "date": "2026-12-03T12:00:00+00:00", "by": "test", "upstream_commit": "",
        "patches": [{"name": "p1.patch", "sha256": _sha(patch)}], "evidence": {}, "note": "",
        "pristine": {"pin": pin or env.stack.commit,
                     "code": code if code is not None else {"tests/test_p.py": _sha(tests)},
                     "patches": {"p1.patch": {"sha256": patch_sha or _sha(patch), "tests": outcomes}}},
    }
    where = env.root / "patches/demo/results"
    where.mkdir(exist_ok=True)
    (where / name).write_text(json.dumps(data, indent=2))
    return where / name


def _findings(env) -> list[str]:
    return [str(f) for f in lint_stack(load_project(env.root), env.stack)]


def _line_of(patch: Path, text: str) -> int:
    return next(i for i, ln in enumerate(patch.read_text().splitlines(), 1) if ln == text)


# ---------------------------------------------------------------- check reads the record
def test_check_refuses_a_bound_test_recorded_passing_on_the_pristine_pin(benv):
    patch = _stack(benv, TAGGED, GUARD)
    _record(benv, {TAGGED: "failed", GUARD: "passed"})
    line = _line_of(patch, f"Regression-Test: {GUARD}")
    [f] = _findings(benv)
    assert f.startswith(f"patches/demo/p1.patch:{line}: error: Regression-Test {GUARD} passes on the pristine pin "
                        "without the patch (patches/demo/results/20261203T120000-integration-cpu.json)"), f
    assert "bind a test that fails without the patch" in f and "not an intent test" in f
    p = cli(benv, "check", "demo")
    assert p.returncode == 1, p.stdout + p.stderr
    [out] = [ln for ln in p.stderr.splitlines() if "pristine" in ln]
    assert out == f, p.stderr


def test_a_failing_pristine_outcome_is_clean(benv):
    _stack(benv, TAGGED, GUARD)
    _record(benv, {TAGGED: "failed", GUARD: "failed"})
    assert _findings(benv) == []
    p = cli(benv, "check", "demo")
    assert p.returncode == 0 and "all stacks clean" in p.stdout, p.stdout + p.stderr


def test_no_record_says_nothing(benv):
    _stack(benv, TAGGED, GUARD)
    assert _findings(benv) == []
    _record(benv, {TAGGED: "failed", GUARD: "not-intent"})  # marked as no evidence: skipped under DSV4_INTENT
    assert _findings(benv) == []
    # a result file without the block (every file written before it existed) is no evidence either
    path = _record(benv, {GUARD: "passed"})
    data = json.loads(path.read_text())
    del data["pristine"]
    path.write_text(json.dumps(data))
    assert _findings(benv) == []


def test_a_record_for_other_patch_bytes_pin_or_test_code_is_not_used(benv):
    patch = _stack(benv, TAGGED, GUARD)
    _record(benv, {GUARD: "passed"}, patch_sha="0" * 64)
    assert _findings(benv) == []
    _record(benv, {GUARD: "passed"}, pin="0" * 40, name="b.json")
    assert _findings(benv) == []
    _record(benv, {GUARD: "passed"}, code={"tests/test_p.py": "0" * 64}, name="c.json")
    assert _findings(benv) == []
    _record(benv, {GUARD: "passed"}, code={}, name="d.json")  # test code not recorded: cannot tell
    assert _findings(benv) == []
    # the same record for today's bytes is used; editing the patch file makes it speak for other bytes
    _record(benv, {GUARD: "passed"}, name="e.json")
    assert len(_findings(benv)) == 1
    patch.write_bytes(patch.read_bytes().replace(b"\nWhy.\n", b"\nWhy, and more.\n"))
    assert _findings(benv) == []


def test_an_id_the_patch_no_longer_binds_is_not_refused(benv):
    _stack(benv, TAGGED)  # the guard's trailer was dropped; an old record naming it says nothing now
    _record(benv, {TAGGED: "failed", GUARD: "passed"})
    assert _findings(benv) == []


# ---------------------------------------------------------------- regress --record writes it
def test_regress_record_writes_each_bound_ids_pristine_outcome_and_check_reads_it(benv):
    _stack(benv, TAGGED, GUARD)
    p = cli(benv, "regress", "demo", "--record", "apply,integration")
    assert p.returncode == 0, p.stdout + p.stderr
    files = sorted((benv.root / "patches/demo/results").glob("*.json"))
    by_level = {json.loads(f.read_text())["level"]: json.loads(f.read_text()) for f in files}
    assert set(by_level) == {"apply", "integration"}
    assert "pristine" not in by_level["apply"]  # no test ran for it
    blk = by_level["integration"]["pristine"]
    assert blk["pin"] == benv.stack.commit
    assert blk["patches"]["p1.patch"] == {"sha256": _sha(benv.root / "patches/demo/p1.patch"),
                                          "tests": {TAGGED: "failed", GUARD: "passed"}}
    assert "tests/test_p.py" in blk["code"]
    p = cli(benv, "check", "demo")
    assert p.returncode == 1 and f"Regression-Test {GUARD} passes on the pristine pin" in p.stderr, p.stderr


# ---------------------------------------------------------------- status --check is red
def test_status_check_is_unverified_when_one_intent_test_passes_on_the_pristine_pin(benv):
    _stack(benv, TAGGED, GUARD)
    p = cli(benv, "status", "demo", "--check", "--json")
    [row] = json.loads(p.stdout)
    [sem] = row["semantic"]
    assert sem["verdict"] == "needed" and sem["passes_on_pristine"] == [GUARD]
    assert list(row["unverified"]) == ["p1.patch"] and GUARD in row["unverified"]["p1.patch"]
    assert p.returncode == 4, p.stdout + p.stderr
    p = cli(benv, "status", "demo", "--check")
    assert p.returncode == 4 and f"unverified: p1.patch: {GUARD} passes on the pristine pin" in p.stdout, p.stdout


def test_status_check_is_green_when_every_intent_test_fails_on_the_pristine_pin(benv):
    _stack(benv, TAGGED)
    p = cli(benv, "status", "demo", "--check", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)[0]["unverified"] == {}, p.stdout + p.stderr


def test_the_pristine_run_of_a_record_computes_afresh_and_runs_only_ids_whose_files_exist(tmp_path, monkeypatch):
    """`regress --record`'s pristine run (bump/semantic.run_on_pristine) is a measurement: its pytest
    gets DSV4_CHECK_MEMO=run (every check computed in that run, none read from an earlier one), and
    a caller's `0` (no store at all) is left as it is; the base tree stands in for the patched tree,
    under DSV4_INTENT=1; ids whose test file is gone are not run, and none left is no run at all."""
    from dsv4_patch.bump import semantic
    from dsv4_patch.regress import RESULT_CACHE_ENV

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_p.py").write_text("def test_a():\n    pass\n")
    cfg = load_project(make_project(tmp_path, tmp_path / "upstream", "a" * 40)).stacks["demo"]
    calls = []
    monkeypatch.setattr(semantic, "run_intent_tests",
                        lambda root, nodes, env, log=None: calls.append((nodes, env)) or {"n": {"outcome": "failed"}})
    base = tmp_path / "base"
    monkeypatch.delenv(RESULT_CACHE_ENV, raising=False)
    got = semantic.run_on_pristine(tmp_path, cfg, base, ["tests/test_p.py::test_a", "tests/gone.py::test_b",
                                                         "tests/test_p.py::test_a"])
    assert got == {"n": {"outcome": "failed"}}
    (nodes, env), = calls
    assert nodes == ["tests/test_p.py::test_a"]
    assert env[RESULT_CACHE_ENV] == "run" and env[semantic.INTENT_ENV] == "1"
    assert env["DSV4_TREE_DEMO"] == env["DSV4_BASE_DEMO"] == str(base)
    monkeypatch.setenv(RESULT_CACHE_ENV, "0")
    semantic.run_on_pristine(tmp_path, cfg, base, ["tests/test_p.py::test_a"])
    assert RESULT_CACHE_ENV not in calls[-1][1]  # the child inherits the caller's 0
    calls.clear()
    assert semantic.run_on_pristine(tmp_path, cfg, base, ["tests/gone.py::test_b"]) == {}
    assert calls == []



def test_a_record_at_the_same_commit_spelled_short_is_used(benv):
    """`pin --source git` writes the full commit id where stacks.toml had an abbreviation (and the other
    way round): the same pin, so the record still speaks for it."""
    _stack(benv, TAGGED, GUARD)
    assert len(benv.stack.commit) == 40, benv.stack.commit
    _record(benv, {GUARD: "passed"}, pin=benv.stack.commit[:9])
    assert len(_findings(benv)) == 1
