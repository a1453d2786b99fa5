"""The upstream-ci level's logic on a tiny synthetic upstream (dsv4_patch/upstream_ci.py).

A base commit with a .pre-commit-config.yaml that pins ruff-pre-commit v0.14.0 (as vLLM's does) and
a file that already has an unused variable (F841); commits on top stand for patches. Ruff 0.14.0
comes from PyPI into the tool cache (once; later runs reuse it). Deterministic: no randomness.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dsv4_patch import precommit
from dsv4_patch.gitcmd import Git
from dsv4_patch.upstream_ci import Release, PytestEnv, run_release

pytestmark = pytest.mark.network  # the hooks' and pytest's pinned versions come from PyPI (cached after)

RUFF_CONFIG = """\
default_stages: [pre-commit, manual]
repos:
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: v0.14.0
  hooks:
  - id: ruff-check
    args: [--output-format, github, --fix]
  - id: ruff-format
"""
AUTHOR = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000"}
# already in the base: F841 (x is never used); formatted as ruff format leaves it
OLD = 'def old():\n    x = 1\n    return 2\n'


def _upstream(tmp_path: Path, config: str | None, base_files: dict[str, str],
              patches: list[tuple[str, dict[str, str]]]) -> Release:
    """A tree as `dsv4-patch apply` leaves it: refs/dsv4/base and one commit per patch."""
    tree = tmp_path / "tree"
    tree.mkdir()
    g = Git(tree)
    g.run("init", "-q", ".")
    files = dict(base_files)
    if config is not None:
        files[precommit.CONFIG_FILE] = config
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    g.run("add", "-A")
    g.run("commit", "-q", "-m", "base", env=AUTHOR)
    g.run("update-ref", "refs/dsv4/base", "HEAD")
    for name, change in patches:
        for path, text in change.items():
            (tree / path).parent.mkdir(parents=True, exist_ok=True)
            (tree / path).write_text(text)
        g.run("add", "-A")
        g.run("commit", "-q", "-m", name, env=AUTHOR)
    return Release("up", tree, tree, [SimpleNamespace(name=n) for n, _ in patches])


def _by_patch(results):
    return {r.patch: r for r in results}


def test_a_patch_that_adds_an_unused_variable_goes_red_and_a_base_finding_does_not_count(tmp_path):
    rel = _upstream(tmp_path, RUFF_CONFIG, {"pkg/old.py": OLD}, [
        # touches old.py (which has the base's F841) and adds clean code: nothing of its own
        ("0001-clean.patch", {"pkg/old.py": OLD + "\n\ndef new():\n    return 3\n"}),
        # a new file with its own F841
        ("0002-f841.patch", {"pkg/new.py": "def f():\n    unused = 1\n    return 2\n"}),
        # not formatted as ruff format 0.14.0 wants
        ("0003-format.patch", {"pkg/fmt.py": "x = {  'a':1 }\n"}),
    ])
    got = _by_patch(run_release(rel, fresh=True, tests=False))
    clean, f841, fmt = got["0001-clean.patch"], got["0002-f841.patch"], got["0003-format.patch"]
    assert clean.tests == {"ruff-check": "passed", "ruff-format": "passed"}, clean.reasons
    assert clean.outcome == "passed"
    assert f841.outcome == "failed" and f841.tests["ruff-check"] == "failed"
    assert "F841" in f841.reasons["ruff-check"] and "pkg/new.py" in f841.reasons["ruff-check"], f841.reasons
    assert f841.tests["ruff-format"] == "passed"
    assert fmt.tests["ruff-format"] == "failed" and "pkg/fmt.py" in fmt.reasons["ruff-format"], fmt.reasons
    assert fmt.reason.startswith("ruff-format: ")  # the one-line result names the hook


def test_a_finding_already_in_the_base_on_a_touched_line_still_does_not_count(tmp_path):
    """The base's F841 moves down (the patch inserts lines above it): same finding, other line."""
    rel = _upstream(tmp_path, RUFF_CONFIG, {"pkg/old.py": OLD}, [
        ("0001-above.patch", {"pkg/old.py": "def first():\n    return 0\n\n\n" + OLD}),
    ])
    r = run_release(rel, fresh=True, tests=False)[0]
    assert r.tests["ruff-check"] == "passed", r.reasons


def test_hooks_that_cannot_run_offline_are_named_and_never_passed(tmp_path):
    config = RUFF_CONFIG + """\
- repo: https://github.com/rhysd/actionlint
  rev: v1.7.7
  hooks:
  - id: actionlint
- repo: https://github.com/example/unknown-hooks
  rev: v1.0.0
  hooks:
  - id: unknown
- repo: local
  hooks:
  - id: in-docker
    name: in-docker
    entry: docker run x
    language: docker_image
  - id: commit-msg-only
    name: commit-msg-only
    entry: false
    language: system
    stages: [commit-msg]
"""
    rel = _upstream(tmp_path, config, {"pkg/old.py": OLD, ".github/workflows/ci.yml": "on: push\n"}, [
        ("0001-clean.patch", {"pkg/old.py": OLD + "\n\ndef new():\n    return 3\n"}),
        ("0002-workflow.patch", {".github/workflows/ci.yml": "on: [push]\n"}),
    ])
    got = _by_patch(run_release(rel, fresh=True, tests=False))
    clean, wf = got["0001-clean.patch"], got["0002-workflow.patch"]
    assert clean.tests["unknown"] == "skipped" and clean.reasons["unknown"].startswith("not-runnable: ")
    assert clean.tests["in-docker"] == "skipped" and "docker_image" in clean.reasons["in-docker"]
    assert "actionlint" not in clean.tests  # only for workflow files
    assert "commit-msg-only" not in clean.tests  # not a hook the CI stage runs
    assert clean.outcome == "partial"  # not everything could be checked: not `passed`
    assert wf.tests["actionlint"] == "skipped" and "Go" in wf.reasons["actionlint"]


def test_a_tree_without_a_pre_commit_config_says_so(tmp_path):
    rel = _upstream(tmp_path, None, {"pkg/old.py": OLD}, [("0001.patch", {"pkg/old.py": OLD + "y = 2\n"})])
    r = run_release(rel, fresh=True, tests=False)[0]
    assert r.tests == {"pre-commit": "skipped"}
    assert r.reasons["pre-commit"] == "not-runnable: no .pre-commit-config.yaml in the tree"
    assert r.outcome == "not-verified"


PIN_TEST = """\
import pytest


def test_runs_under_the_pinned_pytest():
    assert pytest.__version__ == "9.1.0"
"""
NEW_FAILING = "def test_new_and_broken():\n    assert 1 == 2\n"
OLD_FAILING = "def test_was_already_broken():\n    assert 0\n"
NEEDS_GPU = ("def test_cpu_side():\n    pass\n\n\n"
             "def test_on_the_gpu():\n    raise AssertionError('Torch not compiled with CUDA enabled')\n")


def test_in_tree_tests_run_under_the_pinned_pytest_and_only_new_failures_count(tmp_path, venv_template):
    """requirements/test/rocm.txt pins pytest 9.1.0 (the runner's is another): the test files a patch
    adds or changes run under it; a test that failed before the patch is not the patch's."""
    reqs = {"requirements/test/rocm.txt": "pytest==9.1.0\n", "tests/test_old.py": OLD_FAILING}
    rel = _upstream(tmp_path, None, reqs, [
        ("0001-pinned.patch", {"tests/test_pin.py": PIN_TEST}),
        ("0002-broken.patch", {"tests/test_broken.py": NEW_FAILING}),
        ("0003-touches-old.patch", {"tests/test_old.py": OLD_FAILING + "\n\ndef test_fine():\n    pass\n"}),
        ("0004-gpu.patch", {"tests/test_gpu.py": NEEDS_GPU}),
    ])
    env = PytestEnv(python=venv_template / "bin" / "python")  # a venv without pytest: the pins bring it
    got = _by_patch(run_release(rel, provider=lambda cfg, base, pristine: env, fresh=True, lint=False))
    pinned, broken, old = got["0001-pinned.patch"], got["0002-broken.patch"], got["0003-touches-old.patch"]
    assert pinned.tests == {"pytest 9.1.0: tests/test_pin.py": "passed"}, pinned.reasons
    assert broken.outcome == "failed"
    assert "tests/test_broken.py::test_new_and_broken fails under pytest 9.1.0" in broken.reason, broken.reasons
    assert old.tests == {"pytest 9.1.0: tests/test_old.py": "passed"}, old.reasons
    # a test that fails only because this machine has no GPU did not run: not passed, not failed
    gpu = got["0004-gpu.patch"]
    assert gpu.tests == {"pytest 9.1.0: tests/test_gpu.py": "skipped"} and gpu.outcome == "not-verified", gpu.reasons
    assert "1 needs-gpu, 1 passed" in gpu.reason and "Torch not compiled with CUDA" in gpu.reason, gpu.reason


def test_parse_keeps_the_ci_stage_and_reads_frozen_revs():
    text = """\
default_stages: [pre-commit, manual]
repos:
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: f368fb366ff7f2f808dd324b83a6d32267799e19  # frozen: v0.17.2
  hooks:
  - id: ruff-check
    args: [--fix]
- repo: https://github.com/crate-ci/typos
  rev: 9023c1f779400877cafdd98052113fc777e2cfdc
  hooks:
  - id: typos
- repo: local
  hooks:
  - id: local-only
    name: local-only
    entry: x
    language: system
    stages: [pre-commit]
  - id: ci-only
    name: ci-only
    entry: python tools/x.py
    language: python
    additional_dependencies: [regex]
    stages: [manual]
"""
    cfg = precommit.parse(text, "t")
    hooks = {h.id: h for h in cfg.hooks}
    assert set(hooks) == {"ruff-check", "typos", "ci-only"}
    assert hooks["ruff-check"].deps == ["ruff==0.17.2"] and hooks["ruff-check"].args == ["--fix"]
    assert "commit id" in hooks["typos"].not_runnable
    assert hooks["ci-only"].deps == ["regex"] and not hooks["ci-only"].not_runnable
    tags = {"a.py": {"file", "text", "python"}, "b.md": {"file", "text", "markdown"}}
    assert precommit.select(cfg, hooks["ruff-check"], ["a.py", "b.md"], tags) == ["a.py"]


def test_a_config_that_is_not_yaml_is_named_with_its_line():
    with pytest.raises(Exception) as e:
        precommit.parse("repos:\n  - repo: [\n", "tree/.pre-commit-config.yaml")
    assert "tree/.pre-commit-config.yaml:" in str(e.value)
