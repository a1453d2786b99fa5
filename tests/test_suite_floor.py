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


def _report(nodeid: str, when: str, outcome: str, why: str = "") -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, passed=outcome == "passed", skipped=outcome == "skipped",
                           longrepr=("f.py", 1, why) if why else None)


def test_a_group_that_ran_and_passed_nothing_fails_the_floor():
    f = _suite_floor.Floor()
    f.add(_report("tests/regress/vllm/test_a.py::t[v0.27.1]", "setup", "skipped", "Skipped: upstream unreachable"))
    f.add(_report("tests/regress/vllm/test_a.py::t[v0.33.0]", "setup", "skipped", "Skipped: upstream unreachable"))
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


def _pytest(args: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DSV4_TEST_RUN_DIR", "DSV4_SEED", "PYTEST_XDIST_WORKER", "DSV4_TEST_FLOOR")
             and not k.startswith(("DSV4_TREE_", "DSV4_BASE_", "PYTEST_CURRENT"))}
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


@pytest.mark.parametrize("name", ["DSV4_INTENT", "DSV4_TREE_VLLM", "DSV4_BASE_SGLANG"])
def test_the_outermost_run_refuses_child_only_variables_from_the_shell(name):
    p = _pytest(["tests/test_hygiene.py", "--co"], **{name: "1"})
    assert p.returncode == 4, p.stdout[-1500:] + p.stderr[-1500:]
    assert f"{name} set in this shell: dsv4-patch sets them only for the pytest runs it starts" in p.stderr
