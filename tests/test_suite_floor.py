"""tests/_suite_floor.py and the outermost run's guards in tests/conftest.py: a whole-suite run in
which every test of a real-upstream group skipped is red, and variables that dsv4-patch sets only for
its own child runs are refused when they come from the caller's shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import _suite_floor

ROOT = Path(__file__).resolve().parents[1]


def _report(nodeid: str, when: str, outcome: str, why: str = "", upstream: bool = True) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, passed=outcome == "passed", skipped=outcome == "skipped",
                           longrepr=("f.py", 1, why) if why else None,
                           user_properties=[(_suite_floor.TAG, True)] if upstream else [])


def test_a_group_whose_upstream_tests_passed_nothing_fails_the_floor():
    f = _suite_floor.Floor()
    f.add(_report("tests/regress/vllm/test_a.py::t[v0.27.1]", "setup", "skipped", "Skipped: upstream unreachable"))
    f.add(_report("tests/regress/vllm/test_a.py::t[v0.33.0]", "setup", "skipped", "Skipped: upstream unreachable"))
    # the group's own logic, offline: passes, and is no evidence that the upstream tests ran
    f.add(_report("tests/regress/vllm/test_selection.py::t", "setup", "passed", upstream=False))
    f.add(_report("tests/regress/vllm/test_selection.py::t", "call", "passed", upstream=False))
    f.add(_report("tests/regress/sglang/test_b.py::t", "setup", "passed"))
    f.add(_report("tests/regress/sglang/test_b.py::t", "call", "passed"))
    f.add(_report("tests/engine/test_c.py::t", "setup", "skipped", "no CUDA"))  # not a real-upstream group
    assert f.failures() == ["no test of tests/regress/vllm/ passed (2 ran; first skip: Skipped: upstream unreachable)"]
    f.add(_report("tests/regress/vllm/test_a.py::u", "setup", "passed"))
    f.add(_report("tests/regress/vllm/test_a.py::u", "call", "failed"))  # a failure is red on its own
    assert f.failures()[0].startswith("no test of tests/regress/vllm/ passed (3 ran")
    f.add(_report("tests/regress/vllm/test_a.py::v", "setup", "passed"))
    f.add(_report("tests/regress/vllm/test_a.py::v", "call", "passed"))
    assert f.failures() == []  # a group nobody collected (upstream_ci, the session here) is no failure


def test_the_tests_that_take_a_tree_or_are_slow_are_the_ones_counted():
    item = lambda names, slow=False: SimpleNamespace(  # noqa: E731
        fixturenames=names, get_closest_marker=lambda m: object() if slow and m == "slow" else None)
    assert _suite_floor.reaches_upstream(item(["tmp_path", "vllm_check", "dsv4_tree"]))
    assert _suite_floor.reaches_upstream(item(["tmp_path"], slow=True))
    assert not _suite_floor.reaches_upstream(item(["tmp_path", "monkeypatch"]))


@pytest.mark.parametrize("opts, applies", [
    ({}, True), ({"keyword": "reader"}, False), ({"markexpr": "gpu"}, False), ({"lf": True}, False),
    ({"deselect": ["tests/x.py::t"]}, False)])
def test_a_selecting_run_is_left_alone(monkeypatch, opts, applies):
    monkeypatch.delenv(_suite_floor.ENV, raising=False)
    config = SimpleNamespace(option=SimpleNamespace(**opts))
    assert _suite_floor.applies(config, whole_suite=True) is applies
    assert _suite_floor.applies(config, whole_suite=False) is False


def _pytest(args: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DSV4_TEST_RUN_DIR", "DSV4_SEED", "PYTEST_XDIST_WORKER", "DSV4_TEST_FLOOR")
             and not k.startswith(("DSV4_TREE_", "DSV4_BASE_", "DSV4_RELEASE_", "PYTEST_CURRENT"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=300)


def test_a_run_whose_real_upstream_tests_all_skip_is_red():
    """The GPU tests of the vLLM regression skip here (no CUDA device): with the floor on, a run of only
    those is what a CI run with every upstream unreachable looks like, and it must exit 1."""
    gpu_only = ["tests/regress/vllm/test_e4m3_encode_gpu.py", "-m", "gpu"]
    floor = _pytest(gpu_only, DSV4_TEST_FLOOR="1")
    if "passed" in floor.stdout.splitlines()[-1]:
        pytest.skip("a CUDA device is here: the GPU tests ran")
    assert floor.returncode == 1, floor.stdout[-2000:] + floor.stderr[-2000:]
    assert "dsv4 floor: no test of tests/regress/vllm/ passed" in floor.stdout
    plain = _pytest(gpu_only, DSV4_TEST_FLOOR="0")  # the same run without the floor: skips are exit 0
    assert plain.returncode == 0, plain.stdout[-2000:]


@pytest.mark.parametrize("name, paths, refused", [
    ("DSV4_INTENT", ["tests/test_hygiene.py"], True),  # never from the shell
    ("DSV4_INTENT", [], True),
    ("DSV4_TREE_VLLM", [], True),  # the whole suite (`.ci/run`) pointed at another tree
    ("DSV4_BASE_SGLANG", [], True),
    ("DSV4_RELEASE_VLLM", [], True),
    ("DSV4_TREE_VLLM", ["tests/test_hygiene.py"], False),  # some files, on purpose: a developer's run
])
def test_the_outermost_run_refuses_child_only_variables_from_the_shell(name, paths, refused):
    p = _pytest([*paths, "--co"], **{name: "1"})
    if refused:
        assert p.returncode == 4, p.stdout[-1500:] + p.stderr[-1500:]
        assert f"{name} set in this shell: dsv4-patch sets them only for the pytest runs it starts" in p.stderr
    else:
        assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
