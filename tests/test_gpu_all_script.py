"""ci/gpu_all.sh (the H200 run of every GPU-marked test), its step 2 on CPU: the kernel test files are
found by collecting them, and a file that fails to import on the machine must be a failed row of the
run, not a file nobody ran and nobody reports (the run stayed green with it). Planted project: one
GPU-marked file that passes, one that cannot be imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OK = "import pytest\n\n@pytest.mark.gpu\ndef test_on_gpu():\n    assert 1 + 1 == 2\n"
BROKEN = "import pytest\nimport a_module_only_the_gpu_machine_lacks\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n"


def _run(tmp_path: Path, files: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    project = tmp_path / "p"
    (project / "ci").mkdir(parents=True)
    (project / "kernels").mkdir()
    (project / "tests" / "kernels").mkdir(parents=True)
    shutil.copy(ROOT / "ci" / "gpu_all.sh", project / "ci" / "gpu_all.sh")
    (project / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU test\n")
    for name, text in files.items():
        (project / "tests" / "kernels" / name).write_text(text)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "PYTEST_"))}
    env.update(OUT=str(out), PYTHON=sys.executable, GPU_SKIP_REGRESS="1", GPU_COMMIT="test")
    p = subprocess.run(["bash", str(project / "ci" / "gpu_all.sh")], cwd=project, env=env, capture_output=True,
                       text=True, timeout=300)
    return p, out


def test_a_gpu_test_file_that_cannot_be_imported_fails_the_run(tmp_path):
    p, out = _run(tmp_path, {"test_ok_gpu.py": OK, "test_broken_gpu.py": BROKEN})
    rows = (out / "logs" / "summary.tsv").read_text().splitlines()
    assert "pytest\ttests/kernels/test_ok_gpu.py\t0" in rows, rows  # the good file still runs
    assert "collect\tgpu-files\t2" in rows, rows
    assert p.returncode == 1, p.stdout + p.stderr
    assert "collecting the GPU test files failed (exit 2)" in p.stdout
    assert "a_module_only_the_gpu_machine_lacks" in (out / "logs" / "collect-gpu-files.log").read_text()


def test_every_file_collected_and_passing_is_a_green_run(tmp_path):
    p, out = _run(tmp_path, {"test_ok_gpu.py": OK})
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "logs" / "summary.tsv").read_text().splitlines() == ["pytest\ttests/kernels/test_ok_gpu.py\t0"]
