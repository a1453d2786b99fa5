"""tools/cmd_e2e.py: thin glue, documented exit codes, --json, --record, render_matrix."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from tools import cmd_e2e

FAKE = Path(__file__).resolve().parent / "fake_engine_double.py"


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def status() -> None:  # a second command, as in the real CLI, so "e2e" is a subcommand
        pass

    app.command("e2e")(cmd_e2e.e2e)  # the registration line the lead adds to tools/applypatch.py
    return app


def _invoke(args, scenario, monkeypatch):
    monkeypatch.setenv("DSV4_E2E_WORKER", f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}")
    monkeypatch.setenv("FAKE_ENGINE_SCENARIO", scenario)
    return CliRunner().invoke(_app(), ["e2e", *args])


def test_coherent_run_exits_0_and_prints_the_summary(tmp_path, monkeypatch):
    r = _invoke(["--engine", "vllm", "--model", "/m", "--out", str(tmp_path)], "coherent", monkeypatch)
    assert r.exit_code == 0, r.output
    assert "suite chat32: COHERENT" in r.output and "TOKEN_IDS [223, 30594" in r.output


def test_degraded_run_exits_1_and_json_carries_the_verdict(tmp_path, monkeypatch):
    r = _invoke(["--model", "/m", "--out", str(tmp_path), "--json"], "j08-weak-probe", monkeypatch)
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["verdict"] == "DEGRADED" and Path(data["files"]["junit"]).exists()


def test_usage_errors_exit_2(tmp_path, monkeypatch):
    assert _invoke(["--engine", "trt", "--model", "/m", "--out", str(tmp_path)], "coherent", monkeypatch).exit_code == 2
    assert _invoke(["--launcher", "slurm", "--model", "/m", "--out", str(tmp_path)], "coherent", monkeypatch).exit_code == 2
    assert _invoke(["--model", "/m", "--suite", "nope", "--out", str(tmp_path)], "coherent", monkeypatch).exit_code == 2


def test_record_writes_passed_and_failed_results_and_refuses_unknown_hardware(tmp_path, monkeypatch):
    # Recording writes into the checkout: point it at a scratch one, never this repository.
    root = tmp_path / "repo"
    (root / "patches" / "vllm").mkdir(parents=True)
    (root / "e2e").mkdir()
    (root / "e2e" / "suites").symlink_to(Path(cmd_e2e.__file__).resolve().parents[1] / "e2e" / "suites")
    (root / "patches" / "vllm" / "series").write_text("0001-a.patch\n")
    (root / "patches" / "vllm" / "0001-a.patch").write_text("a\n")
    (root / "patches" / "stacks.toml").write_text(
        '[stacks.vllm]\nupstream = "u"\ncommit = "6e448d0ea"\n[[stacks.vllm.sources]]\nkind = "path"\npath = "/x"\n')
    from dsv4_patch.e2e import api

    monkeypatch.setattr(api, "PACKAGE_ROOT", root)
    r = _invoke(["--model", "/m", "--out", str(tmp_path / "out"), "--record"], "coherent", monkeypatch)
    assert r.exit_code == 0, r.output
    [rec] = (root / "patches" / "vllm" / "results").glob("*.json")
    data = json.loads(rec.read_text())
    assert data["level"] == "hardware" and data["hardware"] == "fakehw" and data["status"] == "passed"
    assert data["patches"][0]["name"] == "0001-a.patch" and data["evidence"]["first_tokens"][:2] == [223, 30594]
    matrix = cmd_e2e.render_matrix(root)
    assert "0001-a.patch" in matrix and "fakehw" in matrix
    # A failed run is recorded as failed: the matrix must be able to show failures too.
    r = _invoke(["--model", "/m", "--out", str(tmp_path / "out2"), "--record"], "python-fails", monkeypatch)
    assert r.exit_code == 1
    results = root / "patches" / "vllm" / "results"
    assert sorted(json.loads(p.read_text())["status"] for p in results.glob("*.json")) == ["failed", "passed"]
    # A worker that dies before its env stage leaves no hardware to record: refused, nothing written.
    monkeypatch.setenv("DSV4_E2E_WORKER", f"{shlex.quote(sys.executable)} -c 'raise SystemExit(0)'")
    r = CliRunner().invoke(_app(), ["e2e", "--model", "/m", "--out", str(tmp_path / "out3"), "--record"])
    assert r.exit_code == 1 and "--record refused" in r.output
    assert len(list(results.glob("*.json"))) == 2


def test_render_matrix_on_this_repository_shows_every_stack():
    text = cmd_e2e.render_matrix(Path(cmd_e2e.__file__).resolve().parents[1])
    for stack in ("vllm:", "sglang:", "deepgemm:"):
        assert stack in text
    assert json.loads(cmd_e2e.render_matrix(Path(cmd_e2e.__file__).resolve().parents[1], as_json=True))
