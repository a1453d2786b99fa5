"""A broken pin fails the tests that need the tree; only an unreachable source skips them
(tests/conftest.py, `_tree` and `source_unreachable`).

Each case runs a child pytest in a copy of the project (its tests/conftest.py, patches/stacks.toml)
whose vLLM pin is planted with one defect, against a PyPI index served on 127.0.0.1 that lists a
tiny sdist of "vllm 0.27.1" made here (its vllm/_version.py records the pin's commit), a private
tool cache and a git mirror that does not exist. The child's one test asks `dsv4_tree` for the
pristine vLLM tree. The old rule turned every SourceError into "upstream unreachable here": a zeroed
sha256 gave a skip and exit 0."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMIT_RE = re.compile(r'^(commit = )"[^"]*"', re.M)  # the [stacks.vllm] table's, the first one


def _sdist(commit: str) -> bytes:
    """vllm-0.27.1.tar.gz with the files an import reads: vllm/_version.py (setuptools-scm's form)."""
    files = {"vllm-0.27.1/vllm/_version.py": f"__version__ = version = '0.27.1'\n"
                                             f"__commit_id__ = commit_id = 'g{commit}'\n",
             "vllm-0.27.1/vllm/__init__.py": ""}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Index:
    """A PEP 691 index at http://127.0.0.1:PORT/ serving one archive."""

    def __init__(self, archive: bytes):
        self.archive = archive
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                if self.path == "/vllm/":
                    body = json.dumps({"files": [{"filename": "vllm-0.27.1.tar.gz", "url": f"{index.url}/f/vllm-0.27.1.tar.gz",
                                                  "hashes": {"sha256": hashlib.sha256(archive).hexdigest()}}]}).encode()
                elif self.path == "/f/vllm-0.27.1.tar.gz":
                    body = archive
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The project copy's parts that do not change per case, the index, and the stacks.toml text."""
    top = tmp_path_factory.mktemp("pin-refused")
    text = (ROOT / "patches" / "stacks.toml").read_text()
    commit = COMMIT_RE.search(text).group(0).split('"')[1]  # the primary vLLM pin's (abbreviated) id
    index = _Index(_sdist(commit))
    yield top, text, commit, index
    index.close()


def _child(world, name: str, stacks: str, index_url: str) -> subprocess.CompletedProcess:
    top = world[0]
    proj = top / name
    (proj / "tests").mkdir(parents=True)
    for f in ("tests/conftest.py", "tests/_check_cache.py", "tests/_forkserver.py", "tests/_suite_floor.py", "pyproject.toml"):
        if (ROOT / f).is_file():
            shutil.copy2(ROOT / f, proj / f)
    (proj / "patches" / "vllm").mkdir(parents=True)
    (proj / "patches" / "stacks.toml").write_text(stacks)
    (proj / "patches" / "vllm" / "series").write_text("")  # the pristine tree is asked for: no patches
    (proj / "tests" / "test_tree.py").write_text(
        "def test_pristine_tree(dsv4_tree):\n"
        "    t = dsv4_tree('vllm', patched=False)\n"
        "    assert (t / 'vllm' / '_version.py').read_text().startswith(\"__version__ = version = '0.27.1'\")\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_TREE_", "DSV4_BASE_", "DSV4_RELEASE_",
                                                                     "PYTEST_", "DSV4_GIT_MIRROR"))}
    env.update({"DSV4_PATCH_CACHE": str(top / name / ".cache"), "DSV4_PYPI_INDEX": index_url,
                "PIP_INDEX_URL": index_url, "DSV4_VLLM_GIT_MIRROR": str(top / "no-such-mirror"),
                "DSV4_CHECK_MEMO": "0", "DSV4_TEST_WORKERS": "0", "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:xdist", "-p", "no:cacheprovider",
                           f"--basetemp={top / name / 'pt'}", "tests/test_tree.py"],
                          cwd=proj, env=env, capture_output=True, text=True, timeout=600)


def _pinned(world, *, sha256: str | None = None, commit: str | None = None) -> str:
    """stacks.toml with the primary vLLM sdist pinned to the served archive (or `sha256`/`commit`)."""
    _, text, good_commit, index = world
    good = hashlib.sha256(index.archive).hexdigest()
    text = re.sub(r'(\[\[stacks\.vllm\.sources\]\]\nkind = "sdist"\n(?:.*\n)*?sha256 = )"[0-9a-f]*"',
                  lambda m: f'{m.group(1)}"{sha256 or good}"', text, count=1)
    return COMMIT_RE.sub(lambda m: f'{m.group(1)}"{commit or good_commit}"', text, count=1)


def _says(p: subprocess.CompletedProcess) -> str:
    return f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}"


def test_the_good_pin_builds_the_tree(world):
    """The control: the same copy with the served archive's own sha256 passes (the cases below fail
    for their defect, not for the setup)."""
    p = _child(world, "good", _pinned(world), world[3].url)
    assert p.returncode == 0 and "1 passed" in p.stdout, _says(p)


def test_a_zeroed_sha256_fails_not_skips(world):
    p = _child(world, "zero-sha", _pinned(world, sha256="0" * 64), world[3].url)
    assert p.returncode == 1 and "skipped" not in p.stdout.splitlines()[-1], _says(p)
    assert "does not match the pin" in p.stdout and "refused" in p.stdout, _says(p)


def test_a_commit_mismatch_fails_not_skips(world):
    p = _child(world, "bad-commit", _pinned(world, commit="0123456789"), world[3].url)
    assert p.returncode == 1 and "skipped" not in p.stdout.splitlines()[-1], _says(p)
    assert "was built from commit" in p.stdout, _says(p)


def test_an_unreachable_index_skips_with_the_reason(world):
    """Nothing cached and no index answering (a closed port), no git mirror: unreachable, a skip that
    names why."""
    p = _child(world, "offline", _pinned(world), "http://127.0.0.1:9")
    assert p.returncode == 0 and "1 skipped" in p.stdout, _says(p)
    assert "upstream unreachable here" in p.stdout and "cannot read http://127.0.0.1:9/vllm/" in p.stdout, _says(p)
