"""benchmarks/bench_first_run.py: what it prints is the README's evidence, so its two pure steps are
checked here -- the transcript shown with a newcomer's paths, and the cold/warm pairing of commands."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_first_run", ROOT / "benchmarks" / "bench_first_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path: Path) -> dict:
    caches = {"DSV4_PATCH_CACHE": f"{tmp_path}/c/dsv4-patch", "DSV4_VENV_CACHE": f"{tmp_path}/c/dsv4-patch/venvs",
              "XDG_CACHE_HOME": f"{tmp_path}/c/xdg", "PIP_CACHE_DIR": f"{tmp_path}/c/pip"}
    return {"basetemp": tmp_path / "cold-tmp", "caches": caches}


def test_the_transcript_shows_a_newcomers_paths_and_nothing_of_the_run(bench, tmp_path):
    run = _run(tmp_path)
    clone = f"{tmp_path}/cold-tmp/test_readme_commands_and_reali0/dsv4-patch"
    text = (f"$ {clone}/.venv/bin/python3 -m pip install -e '{clone}[test]'\n"
            f"vllm: built {clone}/build/vllm (…)\n"
            f"ImportError: x ({tmp_path}/c/dsv4-patch/venvs/vllm-0.33.0-cpu-1/base/lib/x.py)\n"
            f"cache {tmp_path}/c/dsv4-patch/imports, pip {tmp_path}/c/pip/wheels\n")
    shown = bench.newcomer_paths(text, run)
    assert str(tmp_path) not in shown
    assert shown.splitlines() == [
        "$ /home/you/dsv4-patch/.venv/bin/python3 -m pip install -e '/home/you/dsv4-patch[test]'",
        "vllm: built /home/you/dsv4-patch/build/vllm (…)",
        "ImportError: x (/home/you/.cache/dsv4-patch/venvs/vllm-0.33.0-cpu-1/base/lib/x.py)",
        "cache /home/you/.cache/dsv4-patch/imports, pip /home/you/.cache/pip/wheels",
    ]


def test_cold_and_warm_pair_command_by_command_with_the_ratio(bench, capsys):
    cold = {"steps": [{"command": "a", "seconds": 120.0}, {"command": "b", "seconds": 3.0}], "wall": 130.0, "load": 0.1}
    warm = {"steps": [{"command": "a", "seconds": 40.0}, {"command": "b", "seconds": 0.0}], "wall": 45.0, "load": 0.2}
    rows = bench.report(cold, warm)
    assert [(r["command"], r["ratio"]) for r in rows] == [("a", 3.0), ("b", 300.0)]  # 0 s warm: no division by 0
    out = capsys.readouterr().out
    assert "2:00.0" in out and "40.0 s" in out and "load at start: empty caches 0.10, warm 0.20" in out


def test_runs_of_different_commands_are_refused(bench):
    cold = {"steps": [{"command": "a", "seconds": 1.0}], "wall": 1.0, "load": 0.0}
    warm = {"steps": [{"command": "b", "seconds": 1.0}], "wall": 1.0, "load": 0.0}
    with pytest.raises(SystemExit, match="different commands"):
        bench.report(cold, warm)


def test_the_commands_of_two_runs_compare_as_a_newcomer_types_them(bench, tmp_path, monkeypatch):
    """The session's pip install names the clone, which is in another folder in each run."""
    runs = {}
    for label in ("cold", "warm"):
        clone = tmp_path / f"{label}-tmp" / "test_readme_commands_and_reali0" / "dsv4-patch"

        def fake_run(*a, clone=clone, label=label, **kw):  # the session test writes its times
            (tmp_path / f"{label}-times.json").write_text(
                f'[{{"command": "{clone}/.venv/bin/python3 -m pip install -e \'{clone}[test]\'", "seconds": 2.0}}]')
            return type("P", (), {"returncode": 0})()

        monkeypatch.setattr(bench.subprocess, "run", fake_run)
        runs[label] = bench.run_session(label, tmp_path, _run(tmp_path)["caches"])
    assert runs["cold"]["steps"] == runs["warm"]["steps"] == [
        {"command": "/home/you/dsv4-patch/.venv/bin/python3 -m pip install -e '/home/you/dsv4-patch[test]'", "seconds": 2.0}]
    assert [r["ratio"] for r in bench.report(runs["cold"], runs["warm"])] == [1.0]


def test_a_session_that_ran_no_command_is_a_failure_and_old_figures_are_never_read(bench, tmp_path, monkeypatch):
    """A skipped session test exits 0 with no times: no figures is a failure. A times file an
    earlier run left in a reused folder is not this run's."""
    (tmp_path / "cold-times.json").write_text('[{"command": "old", "seconds": 1.0}]')
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: type("P", (), {"returncode": 0})())
    run = bench.run_session("cold", tmp_path, _run(tmp_path)["caches"])
    assert run["steps"] == [] and run["rc"] != 0
    assert bench._mmss(119.97) == "2:00.0"
