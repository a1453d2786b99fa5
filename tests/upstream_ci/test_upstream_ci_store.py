"""Which upstream-ci results are stored (dsv4_patch/upstream_ci.py, run_release): passes, and skips the
tree decides; never a failure, and never a skip for what this machine could not have this time (a
venv or hook tool that could not be made): stored, such a skip hid the patch's in-tree tests until
the patch changed. And the key follows what the provider says it reads (READS).

The pinned-pytest venv and the test run are stand-ins (pins_dir, run_tests): what is tested here is
the storing, on a synthetic tree; no network."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dsv4_patch import upstream_ci as U
from dsv4_patch.gitcmd import Git
from dsv4_patch.sources.base import Cache

AUTHOR = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000"}


def _release(tmp_path: Path) -> U.Release:
    tree = tmp_path / "tree"
    tree.mkdir()
    g = Git(tree)
    g.run("init", "-q", ".")
    (tree / "requirements" / "test").mkdir(parents=True)
    (tree / "requirements" / "test" / "rocm.txt").write_text("pytest==9.1.0\n")
    g.run("add", "-A")
    g.run("commit", "-q", "-m", "base", env=AUTHOR)
    g.run("update-ref", "refs/dsv4/base", "HEAD")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_new.py").write_text("def test_ok():\n    pass\n")
    g.run("add", "-A")
    g.run("commit", "-q", "-m", "the patch", env=AUTHOR)
    return U.Release("up", tree, tree, [SimpleNamespace(name="0001-the.patch")])


@pytest.fixture
def stubbed(monkeypatch, tmp_path):
    """pins_dir and run_tests stand-ins; `runs` counts the in-tree test runs."""
    runs = []
    monkeypatch.setattr(U, "pins_dir", lambda *a, **k: tmp_path)
    monkeypatch.setattr(U, "run_tests", lambda env, pins, version, tree, files: (
        runs.append(files) or (0, {f: {"outcome": "passed"} for f in files}, "")))
    monkeypatch.delenv(U.MEMO_ENV, raising=False)  # stored results on
    return runs


def test_a_venv_that_could_not_be_made_is_not_stored(tmp_path, stubbed):
    rel, cache = _release(tmp_path), Cache(tmp_path / "cache")
    calls = []

    def provider(cfg, base, pristine):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("pip: connection reset")  # what the machine did this time
        return U.PytestEnv(python=Path("python3"))

    [first] = U.run_release(rel, cache=cache, provider=provider, lint=False)
    assert first.tests == {"pytest 9.1.0": "skipped"} and "connection reset" in first.reasons["pytest 9.1.0"]
    [second] = U.run_release(rel, cache=cache, provider=provider, lint=False)  # computed again: it runs
    assert second.tests == {"pytest 9.1.0: tests/test_new.py": "passed"}, second.reasons
    assert len(stubbed) == 1
    [third] = U.run_release(rel, cache=cache, provider=provider, lint=False)  # the pass is stored
    assert third.tests == second.tests and len(stubbed) == 1 and len(calls) == 2


def test_a_provider_that_says_not_here_is_not_stored(tmp_path, stubbed):
    rel, cache = _release(tmp_path), Cache(tmp_path / "cache")
    answers = iter(["no torch wheel for this machine today", U.PytestEnv(python=Path("python3"))])
    provider = lambda cfg, base, pristine: next(answers)  # noqa: E731
    assert U.run_release(rel, cache=cache, provider=provider, lint=False)[0].tests == {"pytest 9.1.0": "skipped"}
    assert U.run_release(rel, cache=cache, provider=provider, lint=False)[0].tests == {
        "pytest 9.1.0: tests/test_new.py": "passed"}


def test_the_key_follows_the_files_the_provider_reads(tmp_path):
    rel = U.Release("up", tmp_path, tmp_path, [])
    prov = tmp_path / "tests" / "upstream_ci" / "provider.py"
    recipe = tmp_path / "tests" / "regress" / "vllm" / "_recipe.py"
    oracle = tmp_path / "kernels" / "codec.py"
    for f, text in ((prov, "READS = ()\n"), (recipe, "import kernels.codec\nTORCH = '2.13.0'\n"), (oracle, "X = 1\n"),
                    (prov.parent / "test_itself.py", "def test(): pass\n")):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)

    def key():
        return U._memo_key(rel, "a" * 40, "b" * 40, "lint=True tests=True", U._key_files(prov, (recipe,)))

    k0 = key()
    recipe.write_text("import kernels.codec\nTORCH = '2.14.0'\n")
    k1 = key()
    oracle.write_text("X = 2\n")  # reached through the recipe's import
    k2 = key()
    (prov.parent / "test_itself.py").write_text("def test(): assert 1\n")  # the tests that ask: not an input
    k3 = key()
    assert len({k0, k1, k2}) == 3 and k3 == k2
    assert U._memo_key(rel, "a" * 40, "b" * 40, "lint=True tests=True", U._key_files(prov)) != k2  # READS is in it


def test_a_failure_is_not_stored(tmp_path, monkeypatch):
    rel, cache = _release(tmp_path), Cache(tmp_path / "cache")
    runs = []
    monkeypatch.setattr(U, "pins_dir", lambda *a, **k: tmp_path)
    monkeypatch.setattr(U, "run_tests", lambda env, pins, version, tree, files: (
        runs.append(files) or (1, {f"{f}::test_ok": {"outcome": "failed", "why": "flaky"} for f in files}, "")))
    monkeypatch.delenv(U.MEMO_ENV, raising=False)
    provider = lambda cfg, base, pristine: U.PytestEnv(python=Path("python3"))  # noqa: E731
    for n in (1, 2):
        [r] = U.run_release(rel, cache=cache, provider=provider, lint=False)
        assert r.outcome == "failed" and len(runs) == n  # computed again: never replayed


RUFF = """\
repos:
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: v0.14.0
  hooks:
  - id: ruff-check
"""


def _with_hooks(tmp_path: Path, base: dict[str, str], patch: dict[str, str]) -> tuple[U.Release, str]:
    """_release's tree with a base that has the hooks config (and `base`'s files) and a patch that
    writes `patch`'s files; and the base commit."""
    rel = _release(tmp_path)
    g = Git(rel.tree)
    g.run("checkout", "-q", g.rev("refs/dsv4/base"))
    for name, text in {".pre-commit-config.yaml": RUFF, **base}.items():
        (rel.tree / name).write_text(text)
    g.run("add", "-A")
    g.run("commit", "-q", "-m", "base with hooks", env=AUTHOR)
    g.run("update-ref", "refs/dsv4/base", "HEAD")
    for name, text in patch.items():
        (rel.tree / name).write_text(text)
    g.run("add", "-A")
    g.run("commit", "-q", "-m", "the patch", env=AUTHOR)
    return rel, g.rev("refs/dsv4/base")


def test_a_hook_tool_that_could_not_be_had_is_not_stored(tmp_path, monkeypatch):
    rel, _ = _with_hooks(tmp_path, {}, {"mod.py": "x = 1\n"})  # the config in the base, a Python file in the patch
    cache, tries = Cache(tmp_path / "cache"), []

    def tool_env(*a, **k):
        tries.append(1)
        raise U.Dsv4Error("pip could not reach the index")

    monkeypatch.setattr(U, "tool_env", tool_env)
    monkeypatch.setattr(U, "file_tags", lambda cache, tree, files, progress=None: {
        f: {"file", "text", "python"} for f in files})  # identify's answer, without its venv
    monkeypatch.delenv(U.MEMO_ENV, raising=False)
    for n in (1, 2):
        [r] = U.run_release(rel, cache=cache, tests=False)
        assert r.tests == {"ruff-check": "skipped"} and len(tries) == n, (r.tests, r.reasons)


def test_a_hook_that_cannot_run_before_the_patch_compares_nothing_and_is_not_stored(tmp_path, monkeypatch):
    """The hook reports at the patch (a finding, exit 1) and times out on the tree before it: whether
    the patch introduced the finding cannot be told. Not `failed` (it may be the base's), not `passed`
    (nothing was compared): skipped with the reason, and computed again next time."""
    rel, base = _with_hooks(tmp_path, {"mod.py": "x = 1\n"}, {"mod.py": "x = 2\n"})
    calls = []

    def run_hook(hook, scratch, sel, envdir):
        at_base = Git(scratch).rev("HEAD") == base
        calls.append(at_base)
        if at_base:
            return U.HookRun(0, "", not_runnable="did not finish in 300 s")
        return U.HookRun(1, "mod.py:1:1: F841 local variable `x` is assigned to but never used")

    monkeypatch.setattr(U, "tool_env", lambda *a, **k: tmp_path)
    monkeypatch.setattr(U, "run_hook", run_hook)
    monkeypatch.setattr(U, "file_tags", lambda cache, tree, files, progress=None: {
        f: {"file", "text", "python"} for f in files})
    monkeypatch.delenv(U.MEMO_ENV, raising=False)
    cache = Cache(tmp_path / "cache")
    for n in (1, 2):
        [r] = U.run_release(rel, cache=cache, tests=False)
        assert r.tests == {"ruff-check": "skipped"}, r.reasons
        assert "could not run before it (did not finish in 300 s)" in r.reasons["ruff-check"]
        assert calls == [False, True] * n  # at the patch, then before it: each run, nothing stored
