"""checks/_harness.run_tree_tests: a check that runs a tree's own test file passes only when a test of
that file passed here. pytest exits 0 when every test skipped (a `skipif` the tree's file gains for a
platform): without the count, the sub-check reported the upstream tests as passing when none ran.
(A `-k` that selects nothing exits 5, refused before too.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _vllm_venvs import check_env

CHECKS = Path(__file__).resolve().parent / "checks"
FILES = {
    "passes": "def test_ok():\n    assert 1 + 1 == 2\n",
    "all_skipped": "import pytest\n\n@pytest.mark.skipif(True, reason='CUDA only')\ndef test_gpu():\n    assert False\n",
    "one_skipped_one_passes": ("import pytest\n\n@pytest.mark.skipif(True, reason='CUDA only')\ndef test_gpu():\n"
                               "    pass\n\ndef test_cpu():\n    pass\n"),
    "fails": "def test_bad():\n    assert 1 == 2\n",
    "deselected": "def test_real_kernel():\n    pass\n",
}


def _run(tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True, exist_ok=True)
    (tree / "tests" / f"test_{name}.py").write_text(FILES[name])
    code = ("import sys, _harness\n"
            "try:\n"
            f"    _harness.run_tree_tests({str(tree)!r}, 'tests/test_{name}.py', *{list(extra)!r})\n"
            "except AssertionError as e:\n"
            "    print('REFUSED:', e); sys.exit(3)\n"
            "print('ACCEPTED')\n")
    return subprocess.run([sys.executable, "-c", code], env=check_env(None, [CHECKS]), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name, extra, accepted, why", [
    ("passes", (), True, ""),
    ("one_skipped_one_passes", (), True, ""),
    ("all_skipped", (), False, "no test of tests/test_all_skipped.py passed here (1 skipped)"),
    ("deselected", ("-k", "not real_kernel"), False, "pytest exit 5 on tests/test_deselected.py"),
    ("fails", (), False, "pytest exit 1 on tests/test_fails.py"),
])
def test_tree_tests_count_only_when_one_passed(tmp_path, name, extra, accepted, why):
    run = _run(tmp_path, name, *extra)
    assert run.returncode == (0 if accepted else 3), run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last == "ACCEPTED" if accepted else last == f"REFUSED: {why}", run.stdout
