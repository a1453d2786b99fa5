"""regress -m MARKER --record LEVEL: patches whose bound tests the marker leaves out are not part of
the result (a GPU run records the GPU level for the patches that have GPU tests, nothing else)."""

from __future__ import annotations

import json

from synth import numbered
from test_cli import cli

GPU_TESTS = '''
import os
from pathlib import Path

import pytest


def test_cpu_three():
    assert "line three" in (Path(os.environ["DSV4_TREE_DEMO"]) / "src/a.py").read_text()


@pytest.mark.gpu
def test_gpu_bee():
    assert "b three" in (Path(os.environ["DSV4_TREE_DEMO"]) / "src/b.txt").read_text()
'''


def stack_with_a_gpu_test(env):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo_gpu.py").write_text(GPU_TESTS)
    (env.root / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo_gpu.py::test_cpu_three\n")
    env.author({"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")}, "[DSV4] Bee",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo_gpu.py::test_gpu_bee\n")


def test_marker_run_records_only_the_patches_it_ran(env):
    stack_with_a_gpu_test(env)
    p = cli(env, "regress", "-m", "gpu", "--record", "gpu", "--hardware", "H200", "--json", check=0)
    rep = json.loads(p.stdout)
    assert [r["outcome"] for r in rep["patches"]] == ["no-tests", "passed"], rep
    (f,) = (env.root / "patches/demo/results").glob("*.json")
    data = json.loads(f.read_text())
    assert data["status"] == "passed" and [x["name"] for x in data["patches"]] == [rep["patches"][1]["patch"]]
    rows = json.loads(cli(env, "status", "--matrix", "--json", check=0).stdout)[0]["patches"]
    assert "gpu" not in rows[0]["levels"] and rows[1]["levels"]["gpu"][0]["hardware"] == "H200"


def test_deselected_is_not_missing(env):
    stack_with_a_gpu_test(env)
    p = cli(env, "regress", "-m", "not gpu", "--json", check=0)
    assert [r["outcome"] for r in json.loads(p.stdout)["patches"]] == ["passed", "no-tests"]
