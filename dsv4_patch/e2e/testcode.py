"""The test code a recorded result speaks for, so `status --matrix` can say when it changed since.

A result records a level run of a patch's bound tests (`Regression-Test:` ids). A pass on the H200
says nothing about a GPU test file, or the gate that decides whether it skips, edited after that run.
The test code of a patch is, for every module its ids name:

    the module itself                        tests/regress/vllm/test_e4m3_encode_gpu.py
    its folder's helper modules (`_*.py`)    tests/regress/vllm/_cuda_torch.py (the GPU gate), ...
    every conftest.py from tests/ down       tests/conftest.py, tests/regress/vllm/conftest.py

New results carry `tests: {path: sha256}` of those files (record.py). For a result written before
that field existed, the newest commit that touched any of them is compared with the result's date.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path

from ..gitcmd import Git


def files_of_tests(root: Path, nodes: list[str]) -> list[str]:
    """The files (paths relative to `root`, sorted) that make up the test code of these node ids."""
    root = Path(root)
    files: set[str] = set()
    for node in nodes:
        module = node.split("::", 1)[0]
        path = root / module
        if not path.is_file():
            continue
        files.add(module)
        folder = path.parent
        files.update(p.relative_to(root).as_posix() for p in folder.glob("_*.py") if p.is_file())
        while folder != root and root in folder.parents:
            conftest = folder / "conftest.py"
            if conftest.is_file():
                files.add(conftest.relative_to(root).as_posix())
            folder = folder.parent
    return sorted(files)


def fingerprint(root: Path, files: list[str]) -> dict[str, str]:
    """{path: sha256 of its bytes} for each file that exists."""
    out = {}
    for rel in files:
        p = Path(root) / rel
        if p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class CodeDates:
    """Answers "did this test code change after that result?" for one checkout, asking git once per file."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._git = Git(self.root) if (self.root / ".git").exists() else None
        self._last: dict[str, datetime | None] = {}
        self._dirty: set[str] | None = None

    def _last_commit(self, rel: str) -> datetime | None:
        if rel not in self._last:
            stamp = self._git.out("log", "-1", "--format=%cI", "--", rel, check=False) if self._git else ""
            self._last[rel] = datetime.fromisoformat(stamp) if stamp else None
        return self._last[rel]

    def _uncommitted(self) -> set[str]:
        if self._dirty is None:
            self._dirty = set()
            if self._git is not None:
                out = self._git.run("status", "--porcelain", "--no-renames", "-z", "--", "tests", check=False).out
                self._dirty = {entry[3:] for entry in out.split("\0") if len(entry) > 3}
        return self._dirty

    def changed_since(self, files: list[str], recorded: dict[str, str] | None, date: str) -> list[str]:
        """The test files that changed after the result was recorded (empty: the result still speaks
        for today's test code). With `recorded` (its fingerprint), any file of `files` whose bytes differ from the
        recorded ones (or that the record does not name, or that is gone); without one (an older result), the files whose newest commit is later than
        `date`, or that have uncommitted changes."""
        if recorded is not None:
            now = fingerprint(self.root, files)
            return sorted(f for f in files if now.get(f) != recorded.get(f))
        try:
            when = datetime.fromisoformat(date)
        except ValueError:
            return []
        dirty = self._uncommitted()
        return [f for f in files if f in dirty or ((t := self._last_commit(f)) is not None and t > when)]
